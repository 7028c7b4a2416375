package io.sluice.netty

/**
 * Not a wire message: what the [[NettyMessageDecoder]] passes on instead of a frame longer than
 * spark.sluice.network.maxFrameLength whose message starts with its receiver id
 * ([[NettyMessage.Type.receiverIdFirst]]). The decoder read that id and skipped the rest of the
 * frame; the server refuses the request with an ErrorResponse for the receiver, the client fails
 * the receiving channel, and the connection goes on. Event loop only.
 */
private[netty] final case class OversizedFrame(receiverId: InputChannelID, messageName: String, frameLength: Int,
    maxFrameLength: Int, peer: String) {

  /** Names the frame, its sender and the setting. */
  def describe: String =
    s"a $frameLength-byte $messageName from $peer for receiver $receiverId exceeds the frame limit of " +
      s"$maxFrameLength bytes (spark.sluice.network.maxFrameLength)"
}
