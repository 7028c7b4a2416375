package org.apache.spark.shuffle.sluice

import java.io.{File, FileInputStream}
import java.net.InetAddress
import java.util.Properties
import java.util.concurrent.TimeUnit

import scala.jdk.CollectionConverters._

import io.fabric8.kubernetes.api.model.{GenericKubernetesResource, HasMetadata, Pod, PodBuilder, Quantity, ServiceAccount}
import io.fabric8.kubernetes.api.model.networking.v1.NetworkPolicy
import io.fabric8.kubernetes.api.model.rbac.{Role, RoleBinding}
import io.fabric8.kubernetes.client.KubernetesClient
import io.fabric8.kubernetes.client.dsl.base.ResourceDefinitionContext
import io.fabric8.kubernetes.client.server.mock.{KubernetesCrudDispatcher, KubernetesMockServer}
import io.fabric8.mockwebserver.{Context, MockWebServer, ServerRequest, ServerResponse}
import io.sluice.config.{ConfigType, SluiceOptions}
import org.apache.spark.{SecurityManager, SparkConf}
import org.apache.spark.deploy.k8s.KubernetesConf
import org.apache.spark.deploy.k8s.features.NetworkPolicyFeatureStep
import org.apache.spark.deploy.k8s.submit.{JavaMainAppResource, KubernetesDriverBuilder, MainAppResource, PythonMainAppResource}
import org.apache.spark.resource.ResourceProfile
import org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBuilder
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * The Kubernetes recipe of docs/deploying.md (deploy/kubernetes), as far as no pod runs: Spark's
 * own builders turn deploy/kubernetes/sluice.properties into a driver (for a PySpark and a JVM
 * application) and the executor pods it would ask for, which fabric8's mock API server (CRUD mode,
 * the client version inside pyspark) stores and returns; the operator's SparkApplication and the
 * RBAC objects are stored there too and checked against the properties and against what the driver
 * asked the API server for; and Spark's executor NetworkPolicy admits the executor-to-executor
 * traffic Sluice's servers carry. The JVM and the API server are this test's: no container runs.
 */
class SluiceExecutorPodSuite extends AnyFunSuite with BeforeAndAfterAll {

  private val dir = new File("deploy/kubernetes")
  private val template = new File(dir, "executor-pod-template.yaml")
  private val appId = "spark-0123456789abcdef"
  private val MiB = 1L << 20

  /** deploy/kubernetes/sluice.properties, the recipe's one list of settings. */
  private lazy val recipe: Map[String, String] = {
    val file = new File(dir, "sluice.properties")
    assert(file.isFile, s"no ${file.getAbsolutePath} (the suite runs from the repository root)")
    val p = new Properties()
    val in = new FileInputStream(file)
    try p.load(in)
    finally in.close()
    p.stringPropertyNames().asScala.map(k => k -> p.getProperty(k).trim).toMap
  }

  override def afterAll(): Unit = {
    ResourceProfile.clearDefaultProfile()
    super.afterAll()
  }

  private def namespace: String = recipe("spark.kubernetes.namespace")
  private def sluicePort: Int = recipe(SluiceOptions.Port.key).toInt
  private def networkMemory: Long = ConfigType.BytesType.parse(recipe(SluiceOptions.NetworkMemory.key))
    .fold(e => fail(e), identity)

  /** The recipe's settings as the submission client holds them (what spark-submit reads from the file). */
  private def sparkConf(without: String*): SparkConf = {
    val conf = new SparkConf(false)
      .set("spark.master", "k8s://https://kubernetes.default.svc")
      .set("spark.app.id", appId)
      .set("spark.kubernetes.executor.podNamePrefix", "sluice-app")
    recipe.foreach { case (k, v) => if (!without.contains(k)) conf.set(k, v) }
    conf
  }

  private def withApiServer(body: (KubernetesClient, KubernetesMockServer) => Unit): Unit = {
    val server = new KubernetesMockServer(new Context(), new MockWebServer(),
      new java.util.HashMap[ServerRequest, java.util.Queue[ServerResponse]](), new KubernetesCrudDispatcher(), false)
    server.init(InetAddress.getByName("127.0.0.1"), 0)
    val client = server.createClient()
    try body(client, server)
    finally {
      client.close()
      server.destroy()
    }
  }

  /**
   * The settings the driver of `app` runs with: the recipe's, plus what Spark's driver builder adds
   * for the application's kind (spark.kubernetes.memoryOverheadFactor: 0.40 for Python, as
   * BasicDriverFeatureStep decides), which the driver's executors inherit.
   */
  private def driverConf(client: KubernetesClient, conf: SparkConf, app: MainAppResource): SparkConf = {
    val driver = KubernetesConf.createDriverConf(conf, appId, app, "org.example.Main", Array.empty[String], None)
    val spec = new KubernetesDriverBuilder().buildFromFeatures(driver, client)
    // The driver pod reads the executor template from the ConfigMap Spark mounts for it; here the
    // same file is read from the repository.
    conf.clone().setAll(spec.systemProperties).set("spark.kubernetes.executor.podTemplateFile", template.getPath)
  }

  /** The executor pod as Spark's allocator creates it (from the driver's settings), stored and read back. */
  private def createExecutorPod(client: KubernetesClient, conf: SparkConf, id: String = "1"): Pod = {
    assert(template.isFile, s"no pod template at ${template.getAbsolutePath}")
    val executorConf =
      KubernetesConf.createExecutorConf(conf, id, appId, None, ResourceProfile.DEFAULT_RESOURCE_PROFILE_ID)
    // Spark keeps one default profile per JVM, made from the first conf it sees: this conf's.
    val spec = new KubernetesExecutorBuilder().buildFromFeatures(executorConf, new SecurityManager(conf), client,
      ResourceProfile.reInitDefaultProfile(conf))
    val pod = new PodBuilder(spec.pod.pod).editOrNewSpec().addToContainers(spec.pod.container).endSpec().build()
    client.pods().inNamespace(namespace).resource(pod).create()
    client.pods().inNamespace(namespace).withName(pod.getMetadata.getName).get()
  }

  private def bytes(q: Quantity): Long = Quantity.getAmountInBytes(q).longValueExact()

  private def memoryLimit(pod: Pod): Long = {
    val resources = pod.getSpec.getContainers.asScala.head.getResources
    val limit = bytes(resources.getLimits.get("memory"))
    assert(bytes(resources.getRequests.get("memory")) == limit, resources)
    limit
  }

  private val heap = 4096 * MiB
  private val python = PythonMainAppResource("local:///opt/spark/work-dir/app.py")
  private val jvm = JavaMainAppResource(Some("local:///opt/spark/work-dir/app.jar"))

  test("a PySpark application's executor pod: Sluice's image, local dirs on emptyDir, no port of its own") {
    withApiServer { (client, _) =>
      assert(recipe("spark.executor.memory") == "4g")
      val pod = createExecutorPod(client, driverConf(client, sparkConf(), python))
      val containers = pod.getSpec.getContainers.asScala
      assert(containers.map(_.getName) == Seq("spark-executor"), containers.map(_.getName))
      val c = containers.head
      assert(c.getImage == recipe("spark.kubernetes.container.image"))
      assert(pod.getMetadata.getLabels.get("sluice.io/shuffle") == "sluice")
      // The port is set once, in the properties: the template names none, and each pod binds it on its own IP.
      assert(!c.getPorts.asScala.exists(_.getContainerPort.intValue == sluicePort), c.getPorts)
      assert(!scala.io.Source.fromFile(template).mkString.contains(sluicePort.toString))
      // Spark's local dirs (where Sluice's partition files go) are emptyDir volumes: they go with the pod.
      val env = c.getEnv.asScala.map(e => e.getName -> e.getValue).toMap
      val localDirs = env.getOrElse("SPARK_LOCAL_DIRS", fail(s"no SPARK_LOCAL_DIRS in $env")).split(",").toSeq
      val mounts = c.getVolumeMounts.asScala.map(m => m.getMountPath -> m.getName).toMap
      val volumes = pod.getSpec.getVolumes.asScala.map(v => v.getName -> v).toMap
      assert(localDirs.nonEmpty)
      localDirs.foreach { dir =>
        val volume = mounts.get(dir).flatMap(volumes.get).getOrElse(fail(s"$dir is not a mounted volume: $mounts"))
        assert(volume.getEmptyDir != null, s"$dir: $volume")
      }
    }
  }

  test("memory: the recipe's overhead holds Spark's own for a PySpark application (0.40) plus Sluice's network memory") {
    withApiServer { (client, _) =>
      val recipeLimit = memoryLimit(createExecutorPod(client, driverConf(client, sparkConf(), python), "1"))
      // What Spark alone would give the same PySpark application: the recipe without its overhead.
      val own = driverConf(client, sparkConf("spark.executor.memoryOverhead"), python)
      assert(own.get("spark.kubernetes.memoryOverheadFactor") == "0.4", own.getAll.toSeq)
      val sparkLimit = memoryLimit(createExecutorPod(client, own, "2"))
      assert(sparkLimit - heap == math.max(384 * MiB, (heap * 0.40).toLong / MiB * MiB), sparkLimit)
      assert(recipeLimit >= sparkLimit + networkMemory,
        s"limit $recipeLimit < Spark's own ${sparkLimit / MiB} MiB + network memory ${networkMemory / MiB} MiB")
      assert(recipeLimit == heap + 1702 * MiB, recipeLimit)
    }
  }

  test("memory: a JVM application gets Spark's 0.10, and client mode (no driver step) 0.10 for Python too") {
    withApiServer { (client, _) =>
      val jvmOwn = memoryLimit(createExecutorPod(client,
          driverConf(client, sparkConf("spark.executor.memoryOverhead"),
            jvm), "1"))
      assert(jvmOwn - heap == (heap * 0.10).toLong / MiB * MiB, jvmOwn)
      // The driver outside the cluster (client mode) runs no driver feature step: its executors get the
      // default factor whatever the application's kind, so only an explicit overhead covers Python there.
      val clientMode = memoryLimit(createExecutorPod(client, sparkConf("spark.executor.memoryOverhead"), "2"))
      assert(clientMode == jvmOwn, s"$clientMode != $jvmOwn")
      val recipeLimit = memoryLimit(createExecutorPod(client, sparkConf(), "3"))
      assert(recipeLimit >= jvmOwn + networkMemory)
    }
  }

  test("the operator's SparkApplication: the recipe's settings, a Python application, stored by the API server") {
    withApiServer { (client, _) =>
      val in = new FileInputStream(new File(dir, "sparkapplication.yaml"))
      val app =
        try client.getKubernetesSerialization.unmarshal(in, classOf[GenericKubernetesResource])
        finally in.close()
      assert(app.getApiVersion == "spark.apache.org/v1" && app.getKind == "SparkApplication")
      assert(app.getMetadata.getNamespace == namespace)
      val context = new ResourceDefinitionContext.Builder().withGroup("spark.apache.org").withVersion("v1")
        .withKind("SparkApplication").withPlural("sparkapplications").withNamespaced(true).build()
      client.genericKubernetesResources(context).inNamespace(namespace).resource(app).create()
      val stored = client.genericKubernetesResources(context).inNamespace(namespace)
        .withName(app.getMetadata.getName).get()
      val spec = stored.getAdditionalProperties.get("spec").asInstanceOf[java.util.Map[String, Any]].asScala
      val sparkConf = spec("sparkConf").asInstanceOf[java.util.Map[String, String]].asScala.toMap
      // The operator sets the namespace from the resource and the template from executorSpec.
      val expected = recipe -- Seq("spark.kubernetes.namespace", "spark.kubernetes.executor.podTemplateFile")
      assert(sparkConf == expected,
        s"sparkapplication.yaml and sluice.properties differ: " +
          s"${(sparkConf.toSet diff expected.toSet) ++ (expected.toSet diff sparkConf.toSet)}")
      // Python (pyFiles, no jars): the operator starts it as Spark starts a Python application.
      assert(spec.get("pyFiles").exists(_.toString.startsWith("local:///")), spec)
      assert(!spec.contains("jars"), "a `jars` entry would make this a JVM application (overhead factor 0.10)")
      val labels = spec("executorSpec").asInstanceOf[java.util.Map[String, Any]].get("podTemplateSpec")
        .asInstanceOf[java.util.Map[String, Any]].get("metadata").asInstanceOf[java.util.Map[String, Any]]
        .get("labels").asInstanceOf[java.util.Map[String, String]]
      assert(labels.get("sluice.io/shuffle") == "sluice", labels)
    }
  }

  test("RBAC: the driver's service account may do what the driver asked the API server for") {
    withApiServer { (client, server) =>
      val in = new FileInputStream(new File(dir, "rbac.yaml"))
      val objects: Seq[HasMetadata] =
        try client.load(in).items().asScala.toSeq
        finally in.close()
      objects.foreach(o => client.resource(o).inNamespace(namespace).create())
      val account = recipe("spark.kubernetes.authenticate.driver.serviceAccountName")
      assert(client.serviceAccounts().inNamespace(namespace).withName(account).get() != null)
      val bindings = client.rbac().roleBindings().inNamespace(namespace).list().getItems.asScala
        .filter(_.getSubjects.asScala.exists(s => s.getKind == "ServiceAccount" && s.getName == account))
      assert(bindings.nonEmpty, s"no RoleBinding for $account")
      val rules = bindings.flatMap { b =>
        assert(b.getRoleRef.getKind == "Role", b)
        Option(client.rbac().roles().inNamespace(namespace).withName(b.getRoleRef.getName).get())
          .getOrElse(fail(s"${b.getRoleRef.getName} is not stored")).getRules.asScala
      }
      def allowed(verb: String, resource: String): Boolean = rules.exists(r =>
        r.getApiGroups.asScala.contains("") && r.getResources.asScala.contains(resource) && r.getVerbs.asScala.contains(verb))
      // Acting as the driver: create executor pods, read them, delete them all at the end.
      val conf = driverConf(client, sparkConf(), python)
      val requests = {
        // Everything recorded so far was this test's set-up; from here on, what the driver does.
        (0 until server.getRequestCount).foreach(_ => server.takeRequest(10, TimeUnit.SECONDS))
        val first = server.getRequestCount
        createExecutorPod(client, conf, "1")
        createExecutorPod(client, conf, "2")
        client.pods().inNamespace(namespace).withLabel("spark-app-selector", appId).list()
        client.pods().inNamespace(namespace).withLabel("spark-app-selector", appId).delete()
        (first until server.getRequestCount).map(_ => server.takeRequest(10, TimeUnit.SECONDS))
      }
      assert(requests.size >= 5, requests.map(r => s"${r.getMethod} ${r.getPath}"))
      val asked = requests.map { r =>
        val path = r.getPath.takeWhile(_ != '?')
        val resource = path.split('/').dropWhile(_ != "namespaces").drop(2).headOption.getOrElse(fail(path))
        val named = path.split('/').length > path.split('/').indexOf(resource) + 1
        val verb = (r.getMethod, named) match {
          case ("POST", _) => "create"
          case ("GET", true) => "get"
          case ("GET", false) => if (r.getPath.contains("watch=true")) "watch" else "list"
          case ("DELETE", true) => "delete"
          case ("DELETE", false) => "deletecollection"
          case ("PATCH", _) => "patch"
          case ("PUT", _) => "update"
          case (m, _) => fail(s"unexpected $m $path")
        }
        verb -> resource
      }.distinct
      assert(asked.contains("create" -> "pods"), asked)
      val denied = asked.filterNot { case (verb, resource) => allowed(verb, resource) }
      assert(denied.isEmpty, s"the Role of rbac.yaml does not allow $denied")
      // And what Spark's driver does beyond these requests: executor configmaps, services, on-demand PVCs.
      for (resource <- Seq("pods", "configmaps", "services", "persistentvolumeclaims");
        verb <- Seq("create", "get", "list", "watch", "delete", "deletecollection")) {
        assert(allowed(verb, resource), s"the Role does not allow $verb $resource")
      }
      assert(objects.forall(_.getMetadata.getNamespace == namespace), objects.map(_.getMetadata))
      assert(Seq(classOf[ServiceAccount], classOf[Role], classOf[RoleBinding]).forall(c => objects.exists(c.isInstance)))
    }
  }

  test("Spark's executor NetworkPolicy admits the application's pods on every port, Sluice's included") {
    withApiServer { (client, _) =>
      val conf = sparkConf()
      val executor = createExecutorPod(client, conf)
      val labels = executor.getMetadata.getLabels.asScala
      def selects(matchLabels: java.util.Map[String, String]): Boolean =
        Option(matchLabels).exists(m => !m.isEmpty && m.asScala.forall { case (k, v) => labels.get(k).contains(v) })
      val driverConf = KubernetesConf.createDriverConf(conf, appId, python, "org.example.Main",
        Array.empty[String], None)
      val resources: Seq[HasMetadata] = new NetworkPolicyFeatureStep(driverConf).getAdditionalKubernetesResources()
      val policies = resources.collect { case p: NetworkPolicy => p }
      assert(policies.size == 1, resources)
      // Stored as the submission client would create it, then judged as the API server holds it.
      client.resource(policies.head).inNamespace(namespace).create()
      val policy = client.network().v1().networkPolicies().inNamespace(namespace)
        .withName(policies.head.getMetadata.getName).get()
      assert(selects(policy.getSpec.getPodSelector.getMatchLabels), s"the policy does not cover executor pods: $policy")
      val admitting = policy.getSpec.getIngress.asScala.filter { rule =>
        Option(rule.getFrom).exists(_.asScala.exists(peer =>
            peer.getPodSelector != null &&
              selects(peer.getPodSelector.getMatchLabels)))
      }
      assert(admitting.nonEmpty, s"no ingress rule admits the application's executor pods: $policy")
      // No port list: every port, so Sluice's server port (any spark.sluice.network.port) as well.
      assert(admitting.exists(r =>
          r.getPorts == null || r.getPorts.isEmpty ||
            r.getPorts.asScala.exists(p => p.getPort != null && p.getPort.getIntVal == sluicePort)), policy)
    }
  }
}
