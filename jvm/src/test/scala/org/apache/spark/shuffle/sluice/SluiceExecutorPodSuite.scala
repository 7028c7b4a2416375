package org.apache.spark.shuffle.sluice

import java.io.File
import java.net.InetAddress

import scala.jdk.CollectionConverters._

import io.fabric8.kubernetes.api.model.{HasMetadata, Pod, PodBuilder, Quantity}
import io.fabric8.kubernetes.api.model.networking.v1.NetworkPolicy
import io.fabric8.kubernetes.client.KubernetesClient
import io.fabric8.kubernetes.client.server.mock.{KubernetesCrudDispatcher, KubernetesMockServer}
import io.fabric8.mockwebserver.{Context, MockWebServer, ServerRequest, ServerResponse}
import io.sluice.config.{SluiceConf, SluiceOptions}
import org.apache.spark.{SecurityManager, SparkConf}
import org.apache.spark.deploy.k8s.KubernetesConf
import org.apache.spark.deploy.k8s.features.NetworkPolicyFeatureStep
import org.apache.spark.deploy.k8s.submit.JavaMainAppResource
import org.apache.spark.resource.ResourceProfile
import org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBuilder
import org.scalatest.funsuite.AnyFunSuite

/**
 * The Kubernetes recipe of docs/deploying.md, as far as no pod runs: Spark's own executor pod
 * builder (KubernetesExecutorBuilder, what ExecutorPodsAllocator calls) turns Sluice's settings
 * and deploy/kubernetes/executor-pod-template.yaml into an executor pod, which fabric8's mock API
 * server (CRUD mode, the client version inside pyspark) stores and returns; and Spark's executor
 * NetworkPolicy admits the executor-to-executor traffic Sluice's servers carry.
 */
class SluiceExecutorPodSuite extends AnyFunSuite {

  private val template = new File("deploy/kubernetes/executor-pod-template.yaml")
  private val namespace = "spark-jobs"
  private val appId = "spark-0123456789abcdef"
  private val image = "registry.example.com/spark-sluice:4.3.0"
  private val sluicePort = 7340
  private val MiB = 1L << 20

  /** The settings of the docs' spark-submit command, as the driver holds them. */
  private def sparkConf: SparkConf = new SparkConf(false)
    .set("spark.master", "k8s://https://kubernetes.default.svc")
    .set("spark.app.id", appId)
    .set("spark.kubernetes.namespace", namespace)
    .set("spark.kubernetes.container.image", image)
    .set("spark.kubernetes.executor.podTemplateFile", template.getPath)
    .set("spark.kubernetes.executor.podNamePrefix", "sluice-app")
    .set("spark.executor.memory", "4g")
    .set("spark.executor.memoryOverhead", "480m")
    .set("spark.shuffle.manager", classOf[SluiceShuffleManager].getName)
    .set("spark.plugins", classOf[SluicePlugin].getName)
    .set(SluiceOptions.Port.key, sluicePort.toString)

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

  /** The executor pod as Spark's allocator creates it, stored and read back from the API server. */
  private def createExecutorPod(client: KubernetesClient, conf: SparkConf): Pod = {
    assert(template.isFile, s"no pod template at ${template.getAbsolutePath} (the suite runs from the repository root)")
    val executorConf =
      KubernetesConf.createExecutorConf(conf, "1", appId, None, ResourceProfile.DEFAULT_RESOURCE_PROFILE_ID)
    val spec = new KubernetesExecutorBuilder().buildFromFeatures(executorConf, new SecurityManager(conf), client,
      ResourceProfile.getOrCreateDefaultProfile(conf))
    val pod = new PodBuilder(spec.pod.pod).editOrNewSpec().addToContainers(spec.pod.container).endSpec().build()
    client.pods().inNamespace(namespace).resource(pod).create()
    client.pods().inNamespace(namespace).withName(pod.getMetadata.getName).get()
  }

  private def bytes(q: Quantity): Long = Quantity.getAmountInBytes(q).longValueExact()

  test("the executor pod: Sluice's image, its port named, local dirs on an emptyDir, memory for network buffers") {
    withApiServer { client =>
      val pod = createExecutorPod(client, sparkConf)
      val containers = pod.getSpec.getContainers.asScala
      assert(containers.map(_.getName) == Seq("spark-executor"), containers.map(_.getName))
      val c = containers.head
      assert(c.getImage == image)
      // The template's port survives next to Spark's own.
      val ports = c.getPorts.asScala.map(p => p.getName -> (p.getContainerPort.intValue, p.getProtocol)).toMap
      assert(ports.get("sluice").contains((sluicePort, "TCP")), ports)
      assert(pod.getMetadata.getLabels.get("sluice.io/shuffle") == "sluice")
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
      // The container's memory holds the heap, Spark's own off-heap share and Sluice's network memory.
      val heap = 4096 * MiB
      val sparkOverhead = math.max(384 * MiB, (heap * 0.10).toLong)
      val network = SluiceConf(Map.empty[String, String]).get(SluiceOptions.NetworkMemory)
      val limit = bytes(c.getResources.getLimits.get("memory"))
      assert(limit == (4096 + 480) * MiB, c.getResources)
      assert(bytes(c.getResources.getRequests.get("memory")) == limit, c.getResources)
      assert(limit >= heap + sparkOverhead + network, s"limit $limit < heap + overhead + network memory $network")
    }
  }

  test("Spark's executor NetworkPolicy admits the application's pods on every port, Sluice's included") {
    withApiServer { client =>
      val conf = sparkConf
      val executor = createExecutorPod(client, conf)
      val labels = executor.getMetadata.getLabels.asScala
      def selects(matchLabels: java.util.Map[String, String]): Boolean =
        Option(matchLabels).exists(m => !m.isEmpty && m.asScala.forall { case (k, v) => labels.get(k).contains(v) })
      val driverConf = KubernetesConf.createDriverConf(conf, appId, JavaMainAppResource(None), "org.example.Main",
        Array.empty[String], None)
      val resources: Seq[HasMetadata] = new NetworkPolicyFeatureStep(driverConf).getAdditionalKubernetesResources()
      val policies = resources.collect { case p: NetworkPolicy => p }
      assert(policies.size == 1, resources)
      // Stored as the driver would create it, then judged as the API server holds it.
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
