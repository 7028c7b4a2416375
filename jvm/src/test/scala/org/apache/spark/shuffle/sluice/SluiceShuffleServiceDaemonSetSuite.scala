package org.apache.spark.shuffle.sluice

import java.io.{File, FileInputStream}
import java.net.InetAddress
import java.nio.file.{Files, Path, Paths}

import scala.jdk.CollectionConverters._

import io.fabric8.kubernetes.api.model.{ConfigMap, Container, EnvVar, Pod, PodBuilder, PodSpec}
import io.fabric8.kubernetes.api.model.apps.DaemonSet
import io.fabric8.kubernetes.client.KubernetesClient
import io.fabric8.kubernetes.client.server.mock.{KubernetesCrudDispatcher, KubernetesMockServer}
import io.fabric8.mockwebserver.{Context, MockWebServer, ServerRequest, ServerResponse}
import io.sluice.NodeServiceAddress
import io.sluice.config.{ServiceOptions, SluiceConf}
import org.apache.spark.{SecurityManager, SparkConf}
import org.apache.spark.deploy.k8s.KubernetesConf
import org.apache.spark.resource.ResourceProfile
import org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBuilder
import org.apache.spark.shuffle.sluice.service.SluiceShuffleServiceMain
import org.scalatest.funsuite.AnyFunSuite

/**
 * The Kubernetes recipe for Sluice's node shuffle service, as far as no pod runs (no container
 * engine here): deploy/kubernetes/shuffle-service-daemonset.yaml (a ConfigMap and a DaemonSet),
 * stored and read back by fabric8's mock API server (CRUD mode), and the executor pod Spark's own
 * builder (KubernetesExecutorBuilder) makes from executor-pod-template-shuffle-service.yaml. The
 * kubelet's part is played here: the downward API (status.hostIP of a node), ConfigMap references
 * and `$(VAR)` expansion in the service's arguments, which the service's own parser then reads.
 */
class SluiceShuffleServiceDaemonSetSuite extends AnyFunSuite {

  private val daemonSetFile = new File("deploy/kubernetes/shuffle-service-daemonset.yaml")
  private val template = new File("deploy/kubernetes/executor-pod-template-shuffle-service.yaml")
  private val dockerfile = new File("deploy/kubernetes/Dockerfile")
  private val namespace = "spark-jobs"
  private val appId = "spark-0123456789abcdef"
  private val nodeIp = "10.1.2.3" // the node both pods run on, as its status.hostIP
  private val podIp = "172.16.5.9" // an executor pod's own address (status.podIP), not the node's

  private def withApiServer(body: KubernetesClient => Unit): Unit = {
    val server = new KubernetesMockServer(new Context(), new MockWebServer(),
      new java.util.HashMap[ServerRequest, java.util.Queue[ServerResponse]](), new KubernetesCrudDispatcher(), false)
    server.init(InetAddress.getByName("127.0.0.1"), 0)
    val client = server.createClient()
    try body(client)
    finally {
      client.close()
      server.destroy()
    }
  }

  /** The recipe's objects, applied (`kubectl -n spark-jobs apply -f`) and read back. */
  private def apply(client: KubernetesClient): (ConfigMap, DaemonSet) = {
    assert(daemonSetFile.isFile, s"no recipe at ${daemonSetFile.getAbsolutePath} (the suite runs from the repository root)")
    val in = new FileInputStream(daemonSetFile)
    val items =
      try client.load(in).items().asScala.toSeq
      finally in.close()
    assert(items.map(_.getKind) == Seq("ConfigMap", "DaemonSet"), items.map(_.getKind))
    items.foreach(i => client.resource(i).inNamespace(namespace).create())
    val configMap = client.configMaps().inNamespace(namespace).withName("sluice-shuffle-service").get()
    val daemonSet = client.apps().daemonSets().inNamespace(namespace).withName("sluice-shuffle-service").get()
    assert(configMap != null && daemonSet != null)
    (configMap, daemonSet)
  }

  /** The executor pod Spark's allocator makes from the template, stored and read back. */
  private def executorPod(client: KubernetesClient): Pod = {
    val conf = new SparkConf(false)
      .set("spark.master", "k8s://https://kubernetes.default.svc")
      .set("spark.app.id", appId)
      .set("spark.kubernetes.namespace", namespace)
      .set("spark.kubernetes.container.image", "registry.example.com/spark-sluice:4.3.0")
      .set("spark.kubernetes.executor.podTemplateFile", template.getPath)
      .set("spark.kubernetes.executor.podNamePrefix", "sluice-app")
      .set("spark.shuffle.manager", classOf[SluiceShuffleManager].getName)
      .set("spark.shuffle.sort.io.plugin.class", classOf[SluiceShuffleDataIO].getName)
      .set("spark.plugins", classOf[SluicePlugin].getName)
      .set(ServiceOptions.ServiceEnabled.key, "true")
    val executorConf =
      KubernetesConf.createExecutorConf(conf, "1", appId, None, ResourceProfile.DEFAULT_RESOURCE_PROFILE_ID)
    val spec = new KubernetesExecutorBuilder().buildFromFeatures(executorConf, new SecurityManager(conf), client,
      ResourceProfile.getOrCreateDefaultProfile(conf))
    val pod = new PodBuilder(spec.pod.pod).editOrNewSpec().addToContainers(spec.pod.container).endSpec().build()
    client.pods().inNamespace(namespace).resource(pod).create()
    client.pods().inNamespace(namespace).withName(pod.getMetadata.getName).get()
  }

  /** A container's environment as the kubelet resolves it on node `nodeIp` (values, downward API, ConfigMaps). */
  private def resolvedEnv(c: Container, client: KubernetesClient): Map[String, String] =
    c.getEnv.asScala.map { (e: EnvVar) =>
      val from = e.getValueFrom
      val value =
        if (from == null) e.getValue
        else if (from.getFieldRef != null) from.getFieldRef.getFieldPath match {
          case "status.hostIP" => nodeIp
          case "status.podIP" => podIp
          case other => s"<$other>" // the pod's name and the like: not read here
        }
        else {
          val ref = from.getConfigMapKeyRef
          assert(ref != null, s"$e: only values, status.hostIP and ConfigMap keys are resolved here")
          val map = client.configMaps().inNamespace(namespace).withName(ref.getName).get()
          assert(map != null, s"${e.getName}: no ConfigMap ${ref.getName} in $namespace")
          Option(map.getData.get(ref.getKey)).getOrElse(fail(s"${e.getName}: ConfigMap ${ref.getName} has no ${ref.getKey}"))
        }
      e.getName -> value
    }.toMap

  /** `$(VAR)` in a command's arguments, expanded as the kubelet does. */
  private def expand(arg: String, env: Map[String, String]): String =
    "\\$\\(([A-Za-z_][A-Za-z0-9_]*)\\)".r.replaceAllIn(arg,
      m =>
        java.util.regex.Matcher.quoteReplacement(env.getOrElse(m.group(1), m.matched)))

  /** The node's path behind `path` in a pod's container: through its hostPath volume mounts. */
  private def nodePath(spec: PodSpec, c: Container, path: String): Path = {
    val p = Paths.get(path).normalize()
    val (mountPath, volume) = c.getVolumeMounts.asScala
      .map(m => Paths.get(m.getMountPath).normalize() -> m.getName)
      .filter { case (m, _) => p.startsWith(m) }
      .maxByOption(_._1.getNameCount)
      .getOrElse(fail(s"$path is not on a volume of ${c.getName}: ${c.getVolumeMounts}"))
    val v = spec.getVolumes.asScala.find(_.getName == volume).getOrElse(fail(s"no volume $volume"))
    assert(v.getHostPath != null, s"$path of ${c.getName} is not on a hostPath volume: $v")
    Paths.get(v.getHostPath.getPath).resolve(mountPath.relativize(p)).normalize()
  }

  /** The service's container, its resolved environment and its parsed command line (settings, bound host). */
  private case class Service(container: Container, env: Map[String, String], props: Map[String, String], host: String)

  private def service(daemonSet: DaemonSet, client: KubernetesClient): Service = {
    val containers = daemonSet.getSpec.getTemplate.getSpec.getContainers.asScala
    assert(containers.map(_.getName) == Seq("sluice-shuffle-service"), containers)
    val c = containers.head
    val env = resolvedEnv(c, client)
    val argv = (c.getCommand.asScala ++ c.getArgs.asScala).map(expand(_, env)).toList
    assert(argv.head == "java", argv)
    val mainClass = SluiceShuffleServiceMain.getClass.getName.stripSuffix("$")
    val main = argv.indexOf(mainClass)
    assert(main > 0, s"the container does not run $mainClass: $argv")
    // Sluice's jar sits in the image's Spark jars (deploy/kubernetes/Dockerfile), on the class path.
    assert(argv(argv.indexOf("-cp") + 1) == "/opt/spark/jars/*", argv)
    assert(
      dockerfile.isFile && scala.io.Source.fromFile(dockerfile).getLines().exists(l =>
        !l.trim.startsWith("#") && l.contains("/opt/spark/jars/sluice.jar")),
      s"$dockerfile does not put the jar in /opt/spark/jars")
    val (props, host) = SluiceShuffleServiceMain.parse(argv.drop(main + 1), _ => None)
    Service(c, env, props, host)
  }

  test("the DaemonSet runs the service on each node's address, its port from the ConfigMap, its dirs on the node") {
    withApiServer { client =>
      val (configMap, daemonSet) = apply(client)
      val pod = daemonSet.getSpec.getTemplate.getSpec
      assert(pod.getHostNetwork, "the service listens in the node's network, where other nodes' readers reach it")
      assert(daemonSet.getSpec.getSelector.getMatchLabels.asScala.toSet.subsetOf(
          daemonSet.getSpec.getTemplate.getMetadata.getLabels.asScala.toSet))
      val s = service(daemonSet, client)
      // Bound to the node's address; its port is the ConfigMap's, the one place it is set.
      assert(s.host == nodeIp)
      val port = configMap.getData.get("SLUICE_SERVICE_PORT")
      assert(s.props(ServiceOptions.ServicePort.key) == port)
      // Every Sluice setting it is given is one of Sluice's, with a valid value.
      val sluice = SluiceConf(s.props.filter(_._1.startsWith("spark.sluice.")).toSeq)
      assert(sluice.get(ServiceOptions.ServicePort) == port.toInt)
      val allowed = sluice.get(ServiceOptions.ServiceAllowedDirs)
      val recovery = sluice.get(ServiceOptions.ServiceRecoveryDir)
      // Both dirs on the node, where a new pod of the DaemonSet finds them again.
      val (local, kept) = (nodePath(pod, s.container, allowed), nodePath(pod, s.container, recovery))
      assert(!local.startsWith(kept) && !kept.startsWith(local), (local, kept))
      // The init container makes them, owned by the user both the service and the executors run as.
      val init = pod.getInitContainers.asScala.map(i => (i.getCommand.asScala ++ i.getArgs.asScala).mkString(" "))
      for (dir <- Seq(allowed, recovery)) assert(init.exists(cmd => cmd.contains(s"mkdir -p") && cmd.contains(dir)), init)
      val imageUser = scala.io.Source.fromFile(dockerfile).getLines().map(_.trim).filter(_.startsWith("USER ")).toSeq.last
      assert(pod.getSecurityContext.getRunAsUser.toString == imageUser.stripPrefix("USER ").trim, imageUser)
      assert(init.exists(_.contains(s"chown ${imageUser.stripPrefix("USER ").trim}:")), init)
      // Its probes reach the port through the same variables: no second copy of the number.
      val c = s.container
      for (probe <- Seq(c.getReadinessProbe, c.getLivenessProbe)) {
        val cmd = probe.getExec.getCommand.asScala.mkString(" ")
        assert(cmd.contains("${HOST_IP}/${SLUICE_SERVICE_PORT}"), cmd)
      }
      val manifest = new String(Files.readAllBytes(daemonSetFile.toPath), "UTF-8")
      assert(manifest.split("\n").filterNot(_.trim.startsWith("#")).count(_.contains(port)) == 1,
        s"the port $port appears more than once in $daemonSetFile")
    }
  }

  test("executor pods write where the service reads, and find it at their node's address and the ConfigMap's port") {
    withApiServer { client =>
      val (_, daemonSet) = apply(client)
      val s = service(daemonSet, client)
      val servicePod = daemonSet.getSpec.getTemplate.getSpec
      val pod = executorPod(client)
      val c = pod.getSpec.getContainers.asScala.find(_.getName == "spark-executor").getOrElse(fail(s"$pod"))
      val env = resolvedEnv(c, client)
      // Spark made the template's hostPath volume the executor's local dir (no emptyDir of its own).
      val localDirs = env.getOrElse("SPARK_LOCAL_DIRS", fail(s"no SPARK_LOCAL_DIRS in $env")).split(",").toSeq
      assert(localDirs == Seq("/var/lib/sluice/local"), localDirs)
      assert(pod.getSpec.getVolumes.asScala.forall(_.getEmptyDir == null), pod.getSpec.getVolumes)
      // The same node dir at the same path in both pods: the dirs an executor registers are the
      // paths the service opens, and lie under its allowed dirs.
      val allowed = s.props(ServiceOptions.ServiceAllowedDirs.key)
      assert(nodePath(pod.getSpec, c, localDirs.head) == nodePath(servicePod, s.container, allowed))
      val registered = NodeServiceRegistration.dirsFor(localDirs.map(new File(_)), appId, "1")
      for (dir <- registered) {
        assert(dir.toPath.startsWith(Paths.get(allowed)), s"$dir is not under $allowed")
        assert(nodePath(pod.getSpec, c, dir.getPath) == nodePath(servicePod, s.container, dir.getPath))
      }
      // The executor's service address, as it computes it on this node, is where the service listens.
      val sluice = SluiceConf(Seq(ServiceOptions.ServiceEnabled.key -> "true"))
      assert(NodeServiceRegistration.serviceAddress(sluice, podIp, env.get) ==
        NodeServiceAddress(s.host, s.props(ServiceOptions.ServicePort.key).toInt))
      // Both read the port from the same ConfigMap key.
      def portRef(container: Container) = container.getEnv.asScala.find(_.getName == "SLUICE_SERVICE_PORT")
        .map(e => (e.getValueFrom.getConfigMapKeyRef.getName, e.getValueFrom.getConfigMapKeyRef.getKey))
      assert(portRef(c).isDefined && portRef(c) == portRef(s.container), (portRef(c), portRef(s.container)))
    }
  }
}
