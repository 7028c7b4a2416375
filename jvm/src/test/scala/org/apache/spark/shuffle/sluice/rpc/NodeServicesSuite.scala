package org.apache.spark.shuffle.sluice.rpc

import io.sluice.{NettyLeakDetection, NodeServiceAddress, TestingThreads}
import io.sluice.service.{ShuffleServiceClient, TestingCutLink, TestingNodeService}
import org.scalatest.funsuite.AnyFunSuite

/** What the driver's [[NodeServices]] tells node shuffle services when the application ends, over a link that broke. */
class NodeServicesSuite extends AnyFunSuite with NettyLeakDetection {

  private val App = "app-20260101000000-0043"

  test("an application that ends just after its link to a service came back is still removed there") {
    val node = new TestingNodeService()
    val link = new TestingCutLink(node.port)
    try {
      val writer = node.executor(App, "1")
      TestingNodeService.writeMapOutput(writer, shuffleId = 0, mapId = 3L, numSubpartitions = 2)
      assert(node.filesOf(App).nonEmpty)
      // The driver reaches the service through the link, with a short wait per message.
      val client = new ShuffleServiceClient(node.transportConf, App, None, 1000L)
      val services = new NodeServices(() => client)
      val address = NodeServiceAddress("127.0.0.1", link.port)
      services.announced(address)
      TestingThreads.eventually(what = "the service's first status")(services.lastStatuses.contains(address))
      assert(link.connections == 1)

      // The connection the driver keeps is cut (it still looks open); the driver's next request on it
      // is lost, and a new connection gets through.
      link.cut()
      services.stop()
      assert(link.connections >= 2, "the driver tried again on a new connection")
      TestingThreads.eventually(what = "the application and its files gone from the service")(
        node.service.registry.application(App).isEmpty && node.filesOf(App).isEmpty)
    } finally {
      link.close()
      node.close()
    }
  }
}
