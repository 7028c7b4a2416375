package io.sluice.partition

import java.io.{File, IOException}
import java.nio.file.Files

/** Counts this JVM's open file descriptors on files under a directory (Linux: /proc/self/fd). */
object TestingFileHandles {

  def isSupported: Boolean = new File("/proc/self/fd").isDirectory

  /** Open descriptors whose target lies under `dir` (deleted files included). */
  def openUnder(dir: File): Int = {
    val prefix = dir.getCanonicalPath + File.separator
    Option(new File("/proc/self/fd").listFiles()).getOrElse(Array.empty[File]).count { fd =>
      try Files.readSymbolicLink(fd.toPath).toString.startsWith(prefix)
      catch { case _: IOException => false } // closed while listing
    }
  }
}
