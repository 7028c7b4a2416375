package org.apache.spark.shuffle.sluice.internal

import java.io.{ByteArrayOutputStream, DataInputStream, File, InputStream}
import java.lang.invoke.{MethodHandles, MethodType}
import java.util.Collections
import java.util.concurrent.atomic.AtomicBoolean
import java.util.jar.JarFile

import scala.collection.mutable
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.netty.channel.socket.nio.NioSocketChannel
import io.sluice.netty.SparkPipelineNames
import org.apache.spark.SparkConf
import org.apache.spark.internal.Logging
import org.apache.spark.network.TransportContext
import org.apache.spark.network.server.NoOpRpcHandler
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}

/**
 * Sluice's start-up check of what it assumes about Spark's internals, run once per JVM by both
 * shuffle managers (driver and executors) before anything else. It checks
 *  - the Spark release line ([[SparkVersionCheck]]);
 *  - that every Spark class, method and field the Spark boundary's compiled classes refer to
 *    (the private ones [[SparkInternals]] uses and the shuffle SPI) exists in the running Spark
 *    with the same signature: the JVM links them lazily, so a change would otherwise surface as a
 *    NoSuchMethodError inside some task;
 *  - that a pipeline built by Spark's TransportContext (server and client side) holds the handlers
 *    [[SparkInternals.TransportPipeline]] names, which the upgrade to Sluice's protocol replaces;
 *  - that SQL's UnsafeRowSerializer still has the fields Sluice reads.
 * Any failure stops the application with one message naming the Spark version and every broken
 * assumption. Thread-safe.
 */
private[sluice] object SparkInternalsCheck extends Logging {

  /**
   * A class, field or method a compiled class refers to, in the JVM's notation (owner
   * `org/apache/spark/SparkEnv`, descriptor `()Lorg/apache/spark/storage/BlockManager;`); a
   * reference to the class alone has an empty name.
   */
  final case class Reference(owner: String, name: String, descriptor: String, isField: Boolean) {
    def isClass: Boolean = name.isEmpty
    def describe: String = {
      val o = owner.replace('/', '.')
      if (isClass) s"class $o"
      else if (isField) s"field $o.$name"
      else if (name == "<init>") s"constructor $o$descriptor"
      else s"method $o.$name$descriptor"
    }
  }

  /** The outcome of [[verify]]: the references it linked, or why it failed. */
  private lazy val outcome: Either[IllegalStateException, Seq[Reference]] =
    try Right(verify())
    catch { case e: IllegalStateException => Left(e) }

  /** [[verify]], once per JVM: later calls repeat the first outcome. */
  def verifyOnce(): Unit = outcome.left.foreach(e => throw e)

  private def loader: ClassLoader = Option(Thread.currentThread().getContextClassLoader).getOrElse(getClass.getClassLoader)

  /**
   * The driver's check, at start: [[verifyOnce]], then the identity of the builds it checked
   * ([[CheckedBuild]]) goes into `conf`, which executors receive. Nothing is published when the
   * check could not read the boundary's classes.
   */
  def verifyOnDriver(conf: SparkConf): Unit = {
    verifyOnce()
    checkedBuild match {
      case Some(identity) => conf.set(CheckedBuild.Key, identity)
      case None => conf.remove(CheckedBuild.Key)
    }
  }

  /** The identity of the builds [[verifyOnce]] checked; computed once, by the first shuffle manager. */
  private lazy val checkedBuild: Option[String] = {
    // Spark's SQL jar holds the serializer whose fields fieldProblems checked by name.
    val sql = Seq(SparkInternals.UnsafeRowSerializerClass).filter(name =>
      try { Class.forName(name, false, loader); true }
      catch { case _: ClassNotFoundException | _: LinkageError => false })
    outcome.toOption.filter(_.nonEmpty)
      .flatMap(refs => CheckedBuild.of(refs.map(_.owner).distinct ++ sql :+ getClass.getName, loader))
  }

  /**
   * An executor's check, at start: none when the driver published the identity of the builds it
   * checked and this JVM runs the same ones, else [[verifyOnce]]. Once per JVM.
   */
  def verifyOnExecutor(conf: SparkConf): Unit = {
    val published = conf.getOption(CheckedBuild.Key)
    if (published.exists(CheckedBuild.matches(_, loader))) {
      if (skipLogged.compareAndSet(false, true))
        logInfo("Sluice runs on the Spark and Sluice builds the driver checked; this executor does not check again")
    } else {
      if (published.isDefined && skipLogged.compareAndSet(false, true))
        logInfo(s"This executor's Spark or Sluice jars differ from the driver's (${published.get}); checking them")
      verifyOnce()
    }
  }

  private val skipLogged = new AtomicBoolean()

  /**
   * Throws an IllegalStateException naming the Spark version and each assumption that does not
   * hold; returns the references it linked.
   */
  def verify(): Seq[Reference] = {
    SparkVersionCheck.verify()
    val started = System.nanoTime()
    val references =
      try boundaryReferences()
      catch {
        case NonFatal(e) =>
          logWarning(s"Sluice could not read its own class files to check their links to Spark: $e")
          Nil
      }
    val found = problems(references, SparkInternals.TransportPipeline)
    if (found.nonEmpty) throw failure(org.apache.spark.SPARK_VERSION, found)
    logInfo(s"Spark ${org.apache.spark.SPARK_VERSION}'s internals are as Sluice expects: ${references.size} " +
      s"references linked, handler names found (${(System.nanoTime() - started) / 1000000} ms)")
    references
  }

  def failure(sparkVersion: String, problems: Seq[String]): IllegalStateException =
    new IllegalStateException(s"Sluice ${SparkVersionCheck.sluiceVersion} cannot run on Spark $sparkVersion: " +
      s"Spark's internals are not what it was built against (Spark ${SparkVersionCheck.BuiltFor}):\n" +
      problems.map("  - " + _).mkString("\n") + "\nInstall the Sluice release built for this Spark, or remove the " +
      "spark.shuffle.manager / spark.shuffle.manager.incremental / spark.plugins settings naming Sluice.")

  /** Every broken assumption among `references` and the pipeline `names` (empty: all hold). */
  def problems(references: Seq[Reference], names: SparkPipelineNames): Seq[String] =
    linkProblems(references) ++ pipelineProblems(names) ++ fieldProblems

  // ---- Links ----------------------------------------------------------------------------------

  private def isSpark(owner: String): Boolean =
    owner.startsWith("org/apache/spark/") && !owner.startsWith("org/apache/spark/shuffle/sluice/")

  /** The references to Spark of every class of the Spark boundary (this package and below, tools excepted). */
  def boundaryReferences(): Seq[Reference] = boundaryClassFiles().flatMap(classReferences).distinct

  /** Classes, fields and methods of Spark's that a class file refers to, read from its constant pool. */
  def classReferences(classFile: Array[Byte]): Seq[Reference] = constants(classFile)._1

  /** (Spark references, string literals) of a class file's constant pool. */
  def constants(classFile: Array[Byte]): (Seq[Reference], Seq[String]) = {
    val parsed = parse(classFile)
    (parsed.references, parsed.strings)
  }

  /**
   * The Spark classes a class file names in its own declarations without necessarily linking
   * them: the types in the descriptors and generic signatures of its fields and methods, in its
   * generic superclass and interfaces, and its annotations (a class only passed on as a parameter
   * or return value, or an annotation, is named here but not in [[classReferences]]). Types in the
   * descriptors of the members it calls are Spark's choice, not the class's, and are not included.
   */
  def declaredTypes(classFile: Array[Byte]): Seq[String] = parse(classFile).declaredTypes

  private val TypeInDescriptor = "L(org/apache/spark/[\\w/$]+)[;<]".r

  private final case class Parsed(references: Seq[Reference], strings: Seq[String], declaredTypes: Seq[String])

  private def parse(classFile: Array[Byte]): Parsed = {
    val in = new DataInputStream(new java.io.ByteArrayInputStream(classFile))
    in.readInt(); in.readUnsignedShort(); in.readUnsignedShort() // magic, minor, major
    val count = in.readUnsignedShort()
    val utf8 = new Array[String](count)
    val classIndex = new Array[Int](count)
    val nameAndType = new Array[(Int, Int)](count)
    val members = mutable.ArrayBuffer.empty[(Int, Int, Boolean)] // (class, nameAndType, isField)
    val strings = mutable.ArrayBuffer.empty[Int]
    var i = 1
    while (i < count) {
      in.readUnsignedByte() match {
        case 1 => utf8(i) = in.readUTF()
        case 7 => classIndex(i) = in.readUnsignedShort()
        case 9 => members += ((in.readUnsignedShort(), in.readUnsignedShort(), true))
        case 10 | 11 => members += ((in.readUnsignedShort(), in.readUnsignedShort(), false))
        case 12 => nameAndType(i) = (in.readUnsignedShort(), in.readUnsignedShort())
        case 3 | 4 | 17 | 18 => in.readInt()
        case 5 | 6 => in.readLong(); i += 1
        case 8 => strings += in.readUnsignedShort()
        case 16 | 19 | 20 => in.readUnsignedShort()
        case 15 => in.readUnsignedByte(); in.readUnsignedShort()
        case tag => throw new IllegalArgumentException(s"unknown constant pool tag $tag")
      }
      i += 1
    }
    val classes = classIndex.iterator.filter(_ > 0).map(utf8(_)).filter(isSpark).map(Reference(_, "", "", isField = false))
    val references = classes.toSeq ++ members.toSeq.flatMap { case (c, nt, isField) =>
      val owner = utf8(classIndex(c))
      val (name, descriptor) = nameAndType(nt)
      if (isSpark(owner)) Some(Reference(owner, utf8(name), utf8(descriptor), isField)) else None
    }

    // The rest of the class file: its own declarations' descriptors, signatures and annotations.
    val declared = mutable.ArrayBuffer.empty[String]
    def u2(): Int = in.readUnsignedShort()
    def annotation(): Unit = {
      declared += utf8(u2())
      for (_ <- 0 until u2()) { u2(); elementValue() }
    }
    def elementValue(): Unit = in.readUnsignedByte().toChar match {
      case 'e' => declared += utf8(u2()); u2()
      case 'c' => declared += utf8(u2())
      case '@' => annotation()
      case '[' => for (_ <- 0 until u2()) elementValue()
      case _ => u2()
    }
    def attributes(): Unit = for (_ <- 0 until u2()) {
      val name = utf8(u2())
      val length = in.readInt()
      name match {
        case "Signature" => declared += utf8(u2())
        case "RuntimeVisibleAnnotations" | "RuntimeInvisibleAnnotations" => for (_ <- 0 until u2()) annotation()
        case "RuntimeVisibleParameterAnnotations" | "RuntimeInvisibleParameterAnnotations" =>
          for (_ <- 0 until in.readUnsignedByte(); _ <- 0 until u2()) annotation()
        case _ => in.skipNBytes(length.toLong)
      }
    }
    u2(); u2(); u2() // access flags, this class, super class (a class constant, in references)
    for (_ <- 0 until u2()) u2() // interfaces (class constants)
    for (_ <- 0 until 2; _ <- 0 until u2()) { // fields, then methods
      u2(); u2()
      declared += utf8(u2())
      attributes()
    }
    attributes()
    val declaredTypes = declared.toSeq.flatMap(TypeInDescriptor.findAllMatchIn(_).map(_.group(1))).filter(isSpark).distinct
    Parsed(references, strings.toSeq.map(utf8(_)), declaredTypes)
  }

  /** The class files of the Spark boundary, from the jar or directory this class was loaded from. */
  private def boundaryClassFiles(): Seq[Array[Byte]] = {
    val prefix = "org/apache/spark/shuffle/sluice/"
    def wanted(path: String): Boolean =
      path.startsWith(prefix) && path.endsWith(".class") && !path.startsWith(prefix + "bench/")
    val source = Option(getClass.getProtectionDomain.getCodeSource).map(_.getLocation)
      .getOrElse(throw new IllegalStateException("no code source"))
    val location = new File(source.toURI) // a file: URL (spark.jars are fetched to local files)
    if (location.isDirectory) {
      def walk(f: File): Seq[File] = if (f.isDirectory) f.listFiles().toSeq.flatMap(walk) else Seq(f)
      walk(new File(location, prefix)).map(f => location.toPath.relativize(f.toPath).toString.replace(File.separatorChar, '/'))
        .filter(wanted).sorted.map(p => java.nio.file.Files.readAllBytes(new File(location, p).toPath))
    } else {
      val jar = new JarFile(location)
      try jar.entries().asScala.filter(e => wanted(e.getName)).map(e => readAll(jar.getInputStream(e))).toList
      finally jar.close()
    }
  }

  private def readAll(in: InputStream): Array[Byte] =
    try {
      val out = new ByteArrayOutputStream()
      in.transferTo(out)
      out.toByteArray
    } finally in.close()

  /**
   * The references that do not resolve in the running Spark. Each is resolved the way the JVM
   * links it (a method handle lookup by name and descriptor), which loads only the classes named
   * in its descriptor: Spark classes whose other members need optional libraries can be checked.
   */
  def linkProblems(references: Seq[Reference]): Seq[String] = {
    val loader = this.loader
    references.groupBy(_.owner).toSeq.sortBy(_._1).flatMap { case (owner, refs) =>
      val name = owner.replace('/', '.')
      val loaded: Either[String, Class[_]] =
        try Right(Class.forName(name, false, loader))
        catch { case _: ClassNotFoundException | _: LinkageError => Left(name) }
      loaded match {
        case Left(missing) => Seq(s"class $missing is missing")
        case Right(cls) => refs.filterNot(_.isClass).sortBy(_.describe).flatMap(r => unresolved(cls, r, loader))
      }
    }
  }

  private val lookup = MethodHandles.lookup()

  /** Why `r` does not resolve in `cls`, or None when it does (or exists but is not ours to call). */
  private def unresolved(cls: Class[_], r: Reference, loader: ClassLoader): Option[String] = {

    /** Whether `find` finds the member: access errors mean it exists (protected, in a superclass). */
    def found(find: => Any): Boolean =
      try { find; true }
      catch {
        case _: NoSuchMethodException | _: NoSuchFieldException => false
        case _: IllegalAccessException => true
      }
    try {
      val exists =
        if (r.isField) {
          val tpe = MethodType.fromMethodDescriptorString(s"()${r.descriptor}", loader).returnType()
          found(lookup.findGetter(cls, r.name, tpe)) || found(lookup.findStaticGetter(cls, r.name, tpe))
        } else {
          val tpe = MethodType.fromMethodDescriptorString(r.descriptor, loader)
          if (r.name == "<init>") found(lookup.findConstructor(cls, tpe))
          else found(lookup.findVirtual(cls, r.name, tpe)) || found(lookup.findStatic(cls, r.name, tpe))
        }
      if (exists) None else Some(s"${r.describe} is missing")
    } catch {
      case e: TypeNotPresentException => Some(s"${r.describe}: its type ${e.typeName()} is missing")
      case e: LinkageError =>
        logWarning(s"Sluice could not check its ${r.describe}: $e")
        None
    }
  }

  // ---- Netty pipeline ---------------------------------------------------------------------

  /** The handlers of `names` that a pipeline of Spark's TransportContext lacks, server and client side. */
  def pipelineProblems(names: SparkPipelineNames): Seq[String] = {
    val context = new TransportContext(new TransportConf("sluice", new MapConfigProvider(Collections.emptyMap())),
      new NoOpRpcHandler)
    try Seq(false -> "server", true -> "client").flatMap { case (isClient, side) =>
        val channel = new NioSocketChannel()
        try {
          context.initializePipeline(channel, isClient)
          val present = channel.pipeline().names().asScala.toSet
          val missing = names.required.filterNot(present)
          if (missing.isEmpty) None
          else Some(s"a $side pipeline of Spark's TransportContext has no handler named ${missing.mkString(", ")} " +
            s"(it has ${channel.pipeline().names().asScala.filterNot(_.startsWith("DefaultChannelPipeline")).mkString(", ")})")
        } finally channel.unsafe().closeForcibly()
      }
    finally context.close()
  }

  // ---- Fields read by reflection ------------------------------------------------------------

  /**
   * SQL's UnsafeRowSerializer must keep its int field and its data size metric (when SQL is on the
   * class path at all).
   */
  private def fieldProblems: Seq[String] = {
    val name = SparkInternals.UnsafeRowSerializerClass
    try {
      val cls = Class.forName(name, false, getClass.getClassLoader)
      def fieldType(field: String): Option[Class[_]] =
        try Some(cls.getDeclaredField(field).getType)
        catch { case _: NoSuchFieldException => None }
      val numFields = SparkInternals.UnsafeRowSerializerFields
      val dataSize = SparkInternals.UnsafeRowSerializerDataSize
      val fields =
        if (fieldType(numFields).contains(java.lang.Integer.TYPE)) Nil
        else Seq(s"$name has no int field $numFields (Sluice reads it to decode SQL rows)")
      val metric =
        if (fieldType(dataSize).exists(classOf[org.apache.spark.util.AccumulatorV2[_, _]].isAssignableFrom)) Nil
        else Seq(s"$name has no accumulator field $dataSize (Sluice adds the rows' sizes to it for AQE)")
      fields ++ metric
    } catch {
      case _: ClassNotFoundException => Nil
      case NonFatal(e) => logWarning(s"Sluice could not check $name: $e"); Nil
    }
  }
}
