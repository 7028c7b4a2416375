package io.sluice.serialization

/**
 * Where the deserialiser found the current element: the bytes of a record at (base, offset) as
 * for Platform.copyMemory (inside the current network buffer, or in the deserialiser's own array
 * when the record spanned buffers), or the fields of a latency marker. Valid until the next call
 * to the deserialiser. Reused; not thread-safe.
 */
final class RecordView {
  var base: AnyRef = _
  var offset: Long = 0L
  var length: Int = 0
  var markerCreatedAtMillis: Long = 0L
  var markerProducerStage: Int = 0
  var markerProducerIndex: Int = 0

  /** Copies the record's bytes into a new array (tests, rare paths). */
  def toByteArray: Array[Byte] = {
    val a = new Array[Byte](length)
    org.apache.spark.unsafe.Platform.copyMemory(base, offset, a, org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET, length)
    a
  }
}
