package org.apache.spark.shuffle.sluice.rpc

import io.sluice.NodeServiceAddress
import org.apache.spark.shuffle.sluice.rpc.SluiceMessages.{ExecutorDirs, ReadServer, SluiceServer}
import org.scalatest.funsuite.AnyFunSuite

/**
 * The driver names each reporting executor the servers its readers will read from: its live peers'
 * Sluice servers, never its own, or the node shuffle services that serve their map outputs.
 */
class PeerServersSuite extends AnyFunSuite {

  private def server(id: String, host: String = "10.0.0.1"): SluiceServer = SluiceServer(id, host, 7000 + id.toInt)

  private def read(s: SluiceServer): ReadServer = ReadServer(s.host, s.port)

  private def nodeOf(host: String): NodeServiceAddress = NodeServiceAddress(host, 7338)

  test("an executor learns the servers of the live executors that announced theirs, not its own") {
    val peers = new PeerServers
    assert(peers.announce(Some(server("1")), None, "1", Set("1")).isEmpty, "the first has no peer yet")
    assert(peers.announce(Some(server("2")), None, "2", Set("1", "2")) == Seq(read(server("1"))))
    assert(peers.announce(Some(server("1")), None, "1", Set("1", "2")) == Seq(read(server("2"))))
    // An executor that reports before its server started learns the peers all the same.
    assert(peers.announce(None, None, "3", Set("1", "2", "3")).toSet == Set(read(server("1")), read(server("2"))))
    // Executors that stopped reporting are dropped.
    assert(peers.announce(Some(server("2")), None, "2", Set("2", "3")).isEmpty)
    assert(peers.size == 1)
  }

  test("an answer names at most maxPeers servers") {
    val peers = new PeerServers(maxPeers = 2)
    val live = (1 to 5).map(_.toString).toSet
    (1 to 5).foreach(i => peers.announce(Some(server(i.toString)), None, i.toString, live))
    val named = peers.announce(None, None, "5", live)
    assert(named.size == 2 && !named.contains(read(server("5"))))
  }

  test("answers name the servers announced after the asker's, so every executor is named to maxPeers others") {
    val peers = new PeerServers(maxPeers = 3)
    val ids = (1 to 8).map(_.toString)
    ids.foreach(i => peers.announce(Some(server(i)), None, i, ids.toSet))
    val named = ids.map(i => i -> peers.announce(None, None, i, ids.toSet).map(_.port - 7000).map(_.toString))
    assert(named.toMap.apply("2") == Seq("3", "4", "5") && named.toMap.apply("7") == Seq("8", "1", "2"))
    val namedTo = named.flatMap(_._2).groupBy(identity).view.mapValues(_.size).toMap
    assert(namedTo == ids.map(_ -> 3).toMap, "each server is named to as many executors as an answer names")
    assert(peers.announce(None, None, "9", ids.toSet) == Seq("1", "2", "3").map(i => read(server(i))),
      "one not announced: from the first")
  }

  test("where node services serve the map outputs, executors learn the services, once each, and no peer's server") {
    val peers = new PeerServers
    val live = Set("1", "2", "3", "4")
    // Two hosts, two executors on each, every executor's outputs served by its host's service.
    val hosts = Map("1" -> "10.0.0.1", "2" -> "10.0.0.2", "3" -> "10.0.0.1", "4" -> "10.0.0.2")
    live.toSeq.sorted.foreach(i => peers.announce(Some(server(i, hosts(i))), Some(nodeOf(hosts(i))), i, live))
    val both = Set(ReadServer("10.0.0.1", 7338, node = true), ReadServer("10.0.0.2", 7338, node = true))
    live.foreach { i =>
      val named = peers.announce(None, None, i, live)
      assert(named.toSet == both && named.size == 2, s"executor $i: $named")
    }
    // Alone on its host, an executor reads its own outputs from disk: only the other host's service.
    val alone = new PeerServers
    alone.announce(Some(server("1", "10.0.0.1")), Some(nodeOf("10.0.0.1")), "1", Set("1", "2"))
    assert(alone.announce(Some(server("2", "10.0.0.2")), Some(nodeOf("10.0.0.2")), "2", Set("1", "2")) ==
      Seq(ReadServer("10.0.0.1", 7338, node = true)))
  }

  test("an executor that serves its own outputs beside served ones is named by its server") {
    val peers = new PeerServers
    val live = Set("1", "2", "3")
    peers.announce(Some(server("1")), Some(nodeOf("10.0.0.1")), "1", live)
    peers.announce(Some(server("2", "10.0.0.2")), None, "2", live) // fell back to serving its own outputs
    assert(peers.announce(None, None, "3", live) ==
      Seq(ReadServer("10.0.0.1", 7338, node = true), read(server("2", "10.0.0.2"))))
  }

  test("with pipelined shuffles, a served executor's own server is named too: its pipelined partitions stay on it") {
    val peers = new PeerServers(pipelined = true)
    val live = Set("1", "2")
    peers.announce(Some(server("1")), Some(nodeOf("10.0.0.1")), "1", live)
    assert(peers.announce(Some(server("2", "10.0.0.2")), Some(nodeOf("10.0.0.2")), "2", live) ==
      Seq(ReadServer("10.0.0.1", 7338, node = true), read(server("1"))))
  }

  test("the messages that carry the servers survive Sluice's report encoding") {
    val reply = SluiceMessages.ReportReply(Nil, Seq(read(server("1")), ReadServer("10.0.0.1", 7338, node = true)))
    assert(ReportCodec.decode(ReportCodec.encode(reply)) == reply)
  }

  test("an executor learns the dirs of the other executors on its host: live ones, and gone ones a node service keeps") {
    val peers = new PeerServers
    def dirs(id: String) = Seq(s"/data/$id/a", s"/data/$id/b")
    val live = Set("1", "2", "3", "4")
    peers.announce(Some(server("1")), None, "1", live, dirs("1"))
    assert(peers.hostLocal("1").isEmpty, "alone on its host")
    peers.announce(Some(server("2")), None, "2", live, dirs("2"))
    peers.announce(Some(server("3", host = "10.0.0.2")), None, "3", live, dirs("3"))
    peers.announce(Some(server("4")), Some(nodeOf("10.0.0.1")), "4", live, dirs("4"))
    assert(peers.hostLocal("1") == Seq(ExecutorDirs("2", dirs("2")), ExecutorDirs("4", dirs("4"))))
    assert(peers.hostLocal("3").isEmpty, "nobody else on 10.0.0.2")
    assert(peers.hostLocal("5").isEmpty, "an executor that never said where it writes learns nothing")
    // 2 and 4 are gone: 2's files went with it, 4's stay with its node service.
    peers.announce(Some(server("1")), None, "1", Set("1", "3"), dirs("1"))
    assert(peers.hostLocal("1") == Seq(ExecutorDirs("4", dirs("4"))))
  }
}
