package org.apache.spark.shuffle.sluice.rpc

import org.apache.spark.shuffle.sluice.rpc.SluiceMessages.SluiceServer
import org.scalatest.funsuite.AnyFunSuite

/** The driver names each reporting executor the Sluice servers of its live peers, never its own. */
class PeerServersSuite extends AnyFunSuite {

  private def server(id: String): SluiceServer = SluiceServer(id, "10.0.0.1", 7000 + id.toInt)

  test("an executor learns the servers of the live executors that announced theirs, not its own") {
    val peers = new PeerServers
    assert(peers.announce(Some(server("1")), "1", Set("1")).isEmpty, "the first has no peer yet")
    assert(peers.announce(Some(server("2")), "2", Set("1", "2")) == Seq(server("1")))
    assert(peers.announce(Some(server("1")), "1", Set("1", "2")) == Seq(server("2")))
    // An executor that reports before its server started learns the peers all the same.
    assert(peers.announce(None, "3", Set("1", "2", "3")).toSet == Set(server("1"), server("2")))
    // Executors that stopped reporting are dropped.
    assert(peers.announce(Some(server("2")), "2", Set("2", "3")).isEmpty)
    assert(peers.size == 1)
  }

  test("an answer names at most maxPeers servers") {
    val peers = new PeerServers(maxPeers = 2)
    val live = (1 to 5).map(_.toString).toSet
    (1 to 5).foreach(i => peers.announce(Some(server(i.toString)), i.toString, live))
    val named = peers.announce(None, "5", live)
    assert(named.size == 2 && !named.exists(_.executorId == "5"))
  }

  test("answers name the servers announced after the asker's, so every executor is named to maxPeers others") {
    val peers = new PeerServers(maxPeers = 3)
    val ids = (1 to 8).map(_.toString)
    ids.foreach(i => peers.announce(Some(server(i)), i, ids.toSet))
    val named = ids.map(i => i -> peers.announce(None, i, ids.toSet).map(_.executorId))
    assert(named.toMap.apply("2") == Seq("3", "4", "5") && named.toMap.apply("7") == Seq("8", "1", "2"))
    val namedTo = named.flatMap(_._2).groupBy(identity).view.mapValues(_.size).toMap
    assert(namedTo == ids.map(_ -> 3).toMap, "each server is named to as many executors as an answer names")
    assert(peers.announce(None, "9", ids.toSet) == Seq("1", "2", "3").map(server), "one not announced: from the first")
  }

  test("the messages that carry the servers survive Sluice's RPC encoding") {
    val reply = SluiceMessages.ReportReply(Nil, Seq(server("1")))
    assert(RpcPayload.decode(RpcPayload.encode(reply)) == reply)
  }
}
