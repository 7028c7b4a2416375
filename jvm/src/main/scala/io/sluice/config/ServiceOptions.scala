package io.sluice.config

import io.sluice.config.ConfigOption._
import io.sluice.config.ConfigType._

/**
 * The `spark.sluice.service.*` settings: whether executors hand their finished map outputs to
 * their node's Sluice shuffle service, where to find it, and the service's own settings. Part of
 * [[SluiceOptions.all]], listed after the executor's settings.
 */
object ServiceOptions {

  val ServiceEnabled: ConfigOption[Boolean] = define("spark.sluice.service.enabled", "service_enabled", BooleanType,
    false, "(none: Flink keeps blocking partitions in their TaskManager)", Effect.ExecutorStart) {
    """Whether map outputs are served by the Sluice shuffle service of each executor's node instead of
      |by the executor: executors register with the service at start, write their map outputs where
      |it reads them, and an executor that exits or is released (dynamic allocation) loses none of
      |them while its node lives. Needs spark.shuffle.sort.io.plugin.class=
      |org.apache.spark.shuffle.sluice.SluiceShuffleDataIO, which tells Spark the outputs are kept, and,
      |for dynamic allocation to release idle executors,
      |spark.dynamicAllocation.shuffleTracking.enabled=false (Spark tracks shuffles otherwise;
      |sluice.configure and sluice conf set both)."""
  }

  val ServicePort: ConfigOption[Int] = define("spark.sluice.service.port", "service_port", IntType, 7338,
    "(none)", Effect.ExecutorStart, between(1, 65535)) {
    """Port of the Sluice shuffle service on every node: the service listens on it, executors
      |register with it and reducers read from it. Set the same value for the service and the
      |applications (Spark's own external shuffle service uses 7337). The environment variable
      |SLUICE_SERVICE_PORT of an executor takes precedence (on Kubernetes, set it and the service's
      |port from one ConfigMap)."""
  }

  val ServiceHost: ConfigOption[String] = define("spark.sluice.service.host", "service_host", StringType, "",
    "(none)", Effect.ExecutorStart) {
    """Address at which an executor reaches its node's Sluice shuffle service; empty: the executor's
      |own host (on Kubernetes the executor pod's address is not the node's: set the environment
      |variable SLUICE_SERVICE_HOST from the pod's status.hostIP instead, which takes precedence)."""
  }

  val ServiceFallbackToExecutor: ConfigOption[Boolean] = define("spark.sluice.service.fallbackToExecutor",
    "service_fallback_to_executor", BooleanType, false, "(none)", Effect.ExecutorStart) {
    """What an executor does when its node's Sluice shuffle service cannot be reached or refuses it
      |at start: false fails the executor with an error naming the service (Spark starts another);
      |true logs a warning and serves the executor's own map outputs, which then die with it (a
      |reader that finds them gone fails with a FetchFailedException and Spark recomputes them)."""
  }

  val ServiceApplicationTimeout: ConfigOption[Long] = define("spark.sluice.service.applicationTimeout",
    "service_application_timeout", DurationMsType, 300000L, "(none)", Effect.ServiceStart, atLeast(0L)) {
    """Setting of the Sluice shuffle service daemon: an application whose driver it has not heard
      |from for this long (drivers say they are alive every 30 seconds, or a third of this, whichever
      |is shorter) is removed with its files, so a driver that died leaves nothing behind. 0 never
      |removes an application this way (on YARN the NodeManager says when an application ends)."""
  }

  val ServiceAllowedDirs: ConfigOption[String] = define("spark.sluice.service.allowedDirs", "service_allowed_dirs",
    StringType, "", "(none)", Effect.ServiceStart) {
    """Setting of the Sluice shuffle service: comma-separated directories under which executors'
      |registered dirs must lie (on YARN the NodeManager's local dirs are used); empty: any
      |absolute path. The service only ever reads and deletes files in dirs executors registered."""
  }

  val ServiceRecoveryDir: ConfigOption[String] = define("spark.sluice.service.recoveryDir", "service_recovery_dir",
    StringType, "", "(none)", Effect.ServiceStart) {
    """Setting of the Sluice shuffle service daemon: a directory where it keeps its registrations
      |(applications, their node-service keys, their executors' dirs) so that a restarted service
      |serves the map outputs of executors registered before; empty: none, a restart forgets them
      |(readers then fail with a FetchFailedException and Spark recomputes). On YARN the
      |NodeManager's recovery path is used when its recovery is on."""
  }

  /** The service's settings, in the order the docs list them. */
  val all: Seq[ConfigOption[_]] = Seq(ServiceEnabled, ServicePort, ServiceHost, ServiceFallbackToExecutor,
    ServiceApplicationTimeout, ServiceAllowedDirs, ServiceRecoveryDir)
}
