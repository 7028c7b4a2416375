package io.sluice.partition

import java.lang.reflect.{Field, Modifier}
import java.util.IdentityHashMap

import scala.collection.mutable

/**
 * A rough measure of the heap an object graph holds: a walk over instance fields (reflection)
 * counting 16 bytes per object plus 8 per field, and arrays at their length times their element
 * size. Not the JVM's exact layout, but it grows exactly as the graph's arrays and objects do,
 * which is what a test of "nothing per subpartition, nothing per buffer" needs.
 */
object TestingHeap {

  /** Approximate bytes reachable from `root`, not walking into objects `stop` accepts (counted as 0). */
  def reachableBytes(root: AnyRef, stop: AnyRef => Boolean = _ => false): Long = {
    val seen = new IdentityHashMap[AnyRef, java.lang.Boolean]()
    val todo = mutable.Stack[AnyRef](root)
    var bytes = 0L
    while (todo.nonEmpty) {
      val o = todo.pop()
      if (o != null && !seen.containsKey(o) && !stop(o) && !o.isInstanceOf[Class[_]] && !o.isInstanceOf[Thread]) {
        seen.put(o, true)
        val c = o.getClass
        if (c.isArray) {
          val n = java.lang.reflect.Array.getLength(o)
          val ct = c.getComponentType
          bytes += 16 + n.toLong * elementSize(ct)
          if (!ct.isPrimitive) (0 until n).foreach(i => todo.push(java.lang.reflect.Array.get(o, i)))
        } else {
          bytes += 16
          fields(c).foreach { f =>
            bytes += 8
            if (!f.getType.isPrimitive) {
              try todo.push(f.get(o))
              catch { case _: IllegalAccessException => () }
            }
          }
        }
      }
    }
    bytes
  }

  private val fieldCache = mutable.Map.empty[Class[_], Seq[Field]]

  private def fields(c: Class[_]): Seq[Field] = fieldCache.getOrElseUpdate(c, {
      val own = c.getDeclaredFields.toSeq.filterNot(f => Modifier.isStatic(f.getModifiers)).filter { f =>
        try { f.setAccessible(true); true }
        catch { case _: RuntimeException => false } // a module that is not opened: counted as its fields only
      }
      own ++ Option(c.getSuperclass).map(fields).getOrElse(Nil)
    })

  private def elementSize(c: Class[_]): Int = c match {
    case java.lang.Long.TYPE | java.lang.Double.TYPE => 8
    case java.lang.Integer.TYPE | java.lang.Float.TYPE => 4
    case java.lang.Short.TYPE | java.lang.Character.TYPE => 2
    case java.lang.Byte.TYPE | java.lang.Boolean.TYPE => 1
    case _ => 8
  }
}
