package org.apache.spark.shuffle.sluice.internal

import scala.collection.concurrent.TrieMap
import scala.reflect.runtime.{universe => ru}
import scala.util.control.NonFatal

import org.apache.spark.shuffle.sluice.internal.SparkInternalsCheck.Reference

/**
 * Whether a class or member of Spark's is internal: not part of the API Spark promises to keep.
 * The rule, applied to a reference as the JVM links it (owner class, member name, descriptor):
 *  - a class in a package with a segment named `internal` (`org.apache.spark.internal`,
 *    `org.apache.spark.sql.internal`) is internal, whatever its visibility;
 *  - a Scala class (its top-level class carries a ScalaSignature) is internal when it, or a class
 *    or object enclosing it, is `private` or qualified-private / -protected (`private[spark]`,
 *    `protected[sql]`), as its pickled signature says (read with scala-reflect); a member of a
 *    public Scala class is internal when the member, or the class declaring it, is;
 *  - a Java class is public only when it, or a class enclosing it, is annotated with one of
 *    Spark's API annotations (`org.apache.spark.annotation.Stable`, `Evolving`, `Unstable`,
 *    `DeveloperApi`, `Experimental`) and not with `Private`; every other Java class of Spark's
 *    (network-common, `org.apache.spark.unsafe`, ...) is internal. A member of a public Java class
 *    is internal when it is annotated `Private`.
 * A class that cannot be loaded or read counts as internal. Thread-safe.
 */
final class SparkApiVisibility(loader: ClassLoader) {

  private val mirror = ru.runtimeMirror(loader)
  private val classes = TrieMap.empty[String, Option[String]]

  private val ApiAnnotations = Set("Stable", "Evolving", "Unstable", "DeveloperApi", "Experimental")
    .map("org.apache.spark.annotation." + _)
  private val PrivateAnnotation = "org.apache.spark.annotation.Private"

  /** Why `r` is internal (`"private[spark]"`, `"not annotated as API"`, ...), or None when it is public. */
  def internal(r: Reference): Option[String] =
    classInternal(r.owner).orElse(if (r.isClass) None else memberInternal(r))

  /** Why the class (JVM name `org/apache/spark/Foo$Bar`) is internal, or None when it is public. */
  def classInternal(owner: String): Option[String] = classes.getOrElseUpdate(owner, classifyClass(owner))

  private def load(name: String): Option[Class[_]] =
    try Some(Class.forName(name, false, loader))
    catch { case _: ClassNotFoundException | _: LinkageError => None }

  private def topLevelName(owner: String): String = owner.replace('/', '.').takeWhile(_ != '$')

  private def isScala(owner: String): Boolean = load(topLevelName(owner)).exists { c =>
    c.getAnnotation(classOf[scala.reflect.ScalaSignature]) != null ||
    c.getAnnotation(classOf[scala.reflect.ScalaLongSignature]) != null
  }

  private def classifyClass(owner: String): Option[String] = {
    val name = owner.replace('/', '.')
    val pkg = name.substring(0, name.lastIndexOf('.'))
    if (pkg.split('.').contains("internal")) Some(s"in package $pkg")
    else load(name) match {
      case None => Some("cannot be loaded")
      case Some(cls) if isScala(owner) =>
        try scalaPrivacy(mirror.classSymbol(cls))
        catch { case NonFatal(e) => Some(s"its Scala signature cannot be read ($e)") }
      case Some(cls) => javaClassPrivacy(cls)
    }
  }

  /** `private[spark]` and the like for `sym`, or for the first class or object enclosing it that has one. */
  private def scalaPrivacy(sym: ru.Symbol): Option[String] = {
    def own(s: ru.Symbol): Option[String] = {
      val candidates = if (s.isClass && s.asClass.isModuleClass) Seq(s, s.asClass.module) else Seq(s)
      candidates.collectFirst {
        case c if c.privateWithin != ru.NoSymbol =>
          s"${if (c.isProtected) "protected" else "private"}[${c.privateWithin.name.decodedName}]"
        case c if c.isPrivate => "private"
      }
    }
    Iterator.iterate(sym)(_.owner).takeWhile(s => s != ru.NoSymbol && !s.isPackageClass && !s.isPackage)
      .map(s => own(s).map(p => if (s == sym) p else s"$p ${s.fullName}")).collectFirst { case Some(p) => p }
  }

  private def annotationNames(a: java.lang.reflect.AnnotatedElement): Set[String] =
    a.getAnnotations.map(_.annotationType().getName).toSet

  private def javaClassPrivacy(cls: Class[_]): Option[String] = {
    val enclosing = Iterator.iterate[Class[_]](cls)(_.getEnclosingClass).takeWhile(_ != null).toSeq
    val annotations = enclosing.flatMap(annotationNames)
    if (annotations.contains(PrivateAnnotation)) Some("Java class annotated @Private")
    else if (annotations.exists(ApiAnnotations)) None
    else Some("Java class not annotated as API")
  }

  private def memberInternal(r: Reference): Option[String] =
    if (r.name == "$init$" || r.name == "MODULE$" || r.name == "<clinit>") None
    else load(r.owner.replace('/', '.')) match {
      case None => Some("cannot be loaded")
      case Some(cls) if isScala(r.owner) =>
        try scalaMemberPrivacy(cls, r)
        catch { case NonFatal(e) => Some(s"its Scala signature cannot be read ($e)") }
      case Some(cls) => javaMemberPrivacy(cls, r.name)
    }

  /** The Scala name a JVM member name stands for: default arguments, trait forwarders and specializations map to their method. */
  private def scalaName(jvmName: String): String = {
    val noDefault = jvmName.indexOf("$default$") match { case -1 => jvmName; case i => jvmName.substring(0, i) }
    val noSpecialization = noDefault.replaceAll("\\$mc[A-Z]+\\$sp$", "")
    if (noSpecialization.endsWith("$") && noSpecialization.length > 1) noSpecialization.dropRight(1) else noSpecialization
  }

  private def scalaMemberPrivacy(cls: Class[_], r: Reference): Option[String] = {
    val classSym = mirror.classSymbol(cls)
    // A static method of a class with a companion object is the object's member (a static forwarder).
    val owners = Seq(classSym) ++
      (if (classSym.isModuleClass) Nil
       else Option(classSym.companion).filter(_ != ru.NoSymbol).map(_.asModule.moduleClass.asClass))
    val arity = if (r.isField) -1 else descriptorArity(r.descriptor)
    val found = owners.iterator.map { o =>
      val tpe = o.toType
      val alternatives =
        if (r.name == "<init>") tpe.decl(ru.termNames.CONSTRUCTOR).alternatives
        else tpe.members.filter(m => m.name.encodedName.toString == scalaName(r.name)).toList
      val sameArity = alternatives.filter(a => !a.isMethod || arity < 0 || a.asMethod.paramLists.flatten.size == arity)
      if (sameArity.nonEmpty) sameArity else alternatives
    }.find(_.nonEmpty).getOrElse(Nil)
    // An internal member, or one declared in an internal class (inherited by a public one).
    val reasons = found.map(m => scalaPrivacy(m).orElse(scalaPrivacy(m.owner).map(p => s"declared in ${m.owner.fullName}, $p")))
    if (reasons.nonEmpty && reasons.forall(_.isDefined)) reasons.head else None
  }

  private def descriptorArity(descriptor: String): Int = {
    var i = 1
    var n = 0
    while (i < descriptor.length && descriptor.charAt(i) != ')') {
      while (descriptor.charAt(i) == '[') i += 1
      if (descriptor.charAt(i) == 'L') i = descriptor.indexOf(';', i)
      i += 1
      n += 1
    }
    n
  }

  private def javaMemberPrivacy(cls: Class[_], name: String): Option[String] = {
    val members: Seq[java.lang.reflect.AnnotatedElement] =
      try {
        if (name == "<init>") cls.getDeclaredConstructors.toSeq
        else (cls.getMethods ++ cls.getDeclaredMethods).filter(_.getName == name).toSeq ++
        (cls.getFields ++ cls.getDeclaredFields).filter(_.getName == name).toSeq
      } catch { case _: LinkageError => Nil }
    if (members.nonEmpty && members.forall(m => annotationNames(m).contains(PrivateAnnotation))) Some("annotated @Private")
    else None
  }
}
