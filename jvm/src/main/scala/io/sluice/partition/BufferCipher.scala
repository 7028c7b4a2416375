package io.sluice.partition

import javax.crypto.Cipher
import javax.crypto.spec.IvParameterSpec

import io.netty.buffer.ByteBuf
import org.apache.spark.unsafe.Platform

/**
 * Encrypts and decrypts buffers in place with a [[PartitionedFileCipher]]'s key, AES/CTR from the
 * buffer's own [[BufferIv]]: a partition file's writer encrypts each buffer as it is staged, a
 * reading gate decrypts each buffer after its checksum is verified. One javax.crypto Cipher and a
 * small chunk of heap serve every buffer, so nothing is allocated per record (the JDK's AES is
 * intrinsified where the CPU has AES instructions). Not thread-safe: one per writer or gate.
 */
final class BufferCipher private[partition] (owner: PartitionedFileCipher, cipher: Cipher) {

  private val iv = new Array[Byte](BufferIv.Length)
  private val chunk = new Array[Byte](BufferCipher.ChunkSize)

  /** Encrypts the `length` bytes of direct memory at `address` in place, counting from `from`. */
  def encrypt(address: Long, length: Int, from: BufferIv): Unit = {
    init(Cipher.ENCRYPT_MODE, from)
    crypt(null, address, length)
  }

  /** Decrypts the `length` bytes of `buf` at `index` in place, counting from `from`. */
  def decrypt(buf: ByteBuf, index: Int, length: Int, from: BufferIv): Unit = {
    init(Cipher.DECRYPT_MODE, from)
    if (buf.hasMemoryAddress) crypt(null, buf.memoryAddress() + index, length)
    else if (buf.hasArray) crypt(buf.array(), Platform.BYTE_ARRAY_OFFSET + buf.arrayOffset() + index.toLong, length)
    else {
      var done = 0
      while (done < length) {
        val n = math.min(chunk.length, length - done)
        buf.getBytes(index + done, chunk, 0, n)
        update(n)
        buf.setBytes(index + done, chunk, 0, n)
        done += n
      }
    }
  }

  private def init(mode: Int, from: BufferIv): Unit = {
    from.copyTo(iv)
    cipher.init(mode, owner.key, new IvParameterSpec(iv))
  }

  /** Runs the cipher over `length` bytes at (`base`, `address`), through the chunk. */
  private def crypt(base: AnyRef, address: Long, length: Int): Unit = {
    var done = 0
    while (done < length) {
      val n = math.min(chunk.length, length - done)
      Platform.copyMemory(base, address + done, chunk, Platform.BYTE_ARRAY_OFFSET, n)
      update(n)
      Platform.copyMemory(chunk, Platform.BYTE_ARRAY_OFFSET, base, address + done, n)
      done += n
    }
  }

  private def update(n: Int): Unit = {
    val out = cipher.update(chunk, 0, n, chunk, 0)
    // CTR is a stream mode: every byte in is a byte out. A provider that holds bytes back would corrupt buffers.
    if (out != n) throw new IllegalStateException(s"${cipher.getAlgorithm} returned $out bytes for $n")
  }

  /** Encrypts and decrypts a few odd-sized bytes, failing when this JVM cannot (start-up check). */
  private[partition] def selfCheck(): Unit = {
    val plain = Array.tabulate[Byte](37)(i => (i * 7).toByte)
    val data = io.netty.buffer.Unpooled.wrappedBuffer(plain.clone())
    val from = BufferIv(-1L, -3L) // the counter wraps within the buffer
    decrypt(data, 0, plain.length, from) // CTR: decryption and encryption are the same operation
    if (java.util.Arrays.equals(data.array(), plain)) throw new IllegalStateException(s"${cipher.getAlgorithm} changed nothing")
    decrypt(data, 0, plain.length, from)
    if (!java.util.Arrays.equals(data.array(), plain)) {
      throw new IllegalStateException(s"${cipher.getAlgorithm} does not decrypt what it encrypted")
    }
  }
}

object BufferCipher {

  /** Bytes ciphered per step: buffers go through this much heap at a time. */
  private val ChunkSize = 16 * 1024
}
