/*
 * A YARN cluster for tests/test_yarn.py: one ResourceManager and N NodeManagers in this JVM
 * (Hadoop's MiniYARNCluster, set up as Spark's own BaseYarnClusterSuite does), on loopback.
 *
 *   java -cp <hadoop-client-minicluster, hadoop-client-api, hadoop-client-runtime> \
 *       tests/yarn/MiniYarn.java <HADOOP_CONF_DIR> <node managers> <memory MiB per node manager> [SITE_XML]
 *
 * SITE_XML, when given, is a yarn-site.xml whose properties the cluster's NodeManagers read too
 * (an auxiliary service and its settings, as a platform team writes them), over the ones below.
 * Run from the directory the cluster's work files go to (MiniYARNCluster writes under ./target:
 * the NodeManagers' local and log dirs, hence the containers'). Writes yarn-site.xml and
 * core-site.xml into HADOOP_CONF_DIR, prints "READY <ResourceManager address>" and runs until its
 * standard input closes (the test ends, or dies), then stops the cluster and exits.
 */

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.io.PrintWriter;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public final class MiniYarn {

  public static void main(String[] args) throws Exception {
    if (args.length != 3 && args.length != 4) {
      System.err.println("usage: MiniYarn <HADOOP_CONF_DIR> <node managers> <memory MiB per node manager> [SITE_XML]");
      System.exit(2);
    }
    File confDir = new File(args[0]);
    int nodeManagers = Integer.parseInt(args[1]);
    int memoryMb = Integer.parseInt(args[2]);

    YarnConfiguration conf = new YarnConfiguration();
    // The minicluster jar lacks capacity-scheduler.xml: one queue, "default", set by hand.
    conf.set("yarn.scheduler.capacity.root.queues", "default");
    conf.setInt("yarn.scheduler.capacity.root.default.capacity", 100);
    conf.setFloat("yarn.scheduler.capacity.root.default.user-limit-factor", 1);
    conf.setInt("yarn.scheduler.capacity.root.default.maximum-capacity", 100);
    conf.set("yarn.scheduler.capacity.root.default.state", "RUNNING");
    conf.set("yarn.scheduler.capacity.root.default.acl_submit_applications", "*");
    conf.set("yarn.scheduler.capacity.root.default.acl_administer_queue", "*");
    conf.setInt("yarn.scheduler.capacity.node-locality-delay", -1);
    // A full disk on a shared machine must not mark the NodeManagers unhealthy.
    conf.set("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", "100.0");
    // Room for the application master and the executors; the JVMs' real use is far below what
    // YARN accounts (the memory checks are off: many JVMs share this machine's memory).
    conf.setInt("yarn.nodemanager.resource.memory-mb", memoryMb);
    conf.setInt("yarn.nodemanager.resource.cpu-vcores", 4);
    conf.setInt("yarn.scheduler.minimum-allocation-mb", 128);
    conf.setInt("yarn.scheduler.maximum-allocation-mb", memoryMb);
    conf.setBoolean("yarn.nodemanager.pmem-check-enabled", false);
    conf.setBoolean("yarn.nodemanager.vmem-check-enabled", false);
    // Containers' directories are removed as soon as their application ends.
    conf.setInt("yarn.nodemanager.delete.debug-delay-sec", 0);
    // Loopback only.
    conf.set("yarn.nodemanager.hostname", "127.0.0.1");
    conf.set("yarn.resourcemanager.hostname", "127.0.0.1");
    if (args.length == 4) {
      File site = new File(args[3]);
      if (!site.isFile()) {
        throw new IllegalArgumentException("no such yarn-site.xml: " + site);
      }
      conf.addResource(new Path(site.getAbsoluteFile().toURI()));
    }

    MiniYARNCluster cluster = new MiniYARNCluster("sluice-yarn", 1, nodeManagers, 1);
    Runtime.getRuntime().addShutdownHook(new Thread(cluster::stop, "mini-yarn-stop"));
    cluster.init(conf);
    cluster.start();
    // start() may return before the ResourceManager has put its bound port in the configuration.
    Configuration running = cluster.getConfig();
    long deadline = System.nanoTime() + 60_000_000_000L;
    while (running.get(YarnConfiguration.RM_ADDRESS, ":0").endsWith(":0")) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("the ResourceManager published no port within 60 s");
      }
      Thread.sleep(100);
    }
    if (!confDir.isDirectory() && !confDir.mkdirs()) {
      throw new IllegalStateException("cannot create " + confDir);
    }
    try (OutputStream out = new FileOutputStream(new File(confDir, "yarn-site.xml"))) {
      running.writeXml(out);
    }
    try (PrintWriter out = new PrintWriter(new File(confDir, "core-site.xml"), "UTF-8")) {
      out.println("<?xml version=\"1.0\"?>");
      out.println("<configuration>");
      out.println("  <property><name>fs.defaultFS</name><value>file:///</value></property>");
      out.println("</configuration>");
    }
    System.out.println("READY " + running.get(YarnConfiguration.RM_ADDRESS));
    System.out.flush();
    while (System.in.read() != -1) {
      // runs until the test closes our standard input
    }
    cluster.stop();
    System.exit(0);
  }
}
