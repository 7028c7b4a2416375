"""Sluice's node shuffle service as a process of its own (``sluice shuffle-service``): one per host
on standalone clusters and Kubernetes (YARN runs it inside its NodeManagers instead). It runs the
JVM entry point in the plugin jar with the Spark jars of this PySpark on its class path."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import List, Mapping, Sequence

from sluice._jars import jar_path

MAIN_CLASS = "org.apache.spark.shuffle.sluice.service.SluiceShuffleServiceMain"


def java_binary(environ: Mapping[str, str]) -> str:
    """The ``java`` of ``JAVA_HOME``, else the one on the ``PATH``."""
    home = environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").is_file():
        return str(Path(home, "bin", "java"))
    found = shutil.which("java")
    if found is None:
        raise FileNotFoundError("sluice shuffle-service needs a Java 17 runtime: set JAVA_HOME or put java on the PATH")
    return found


def spark_jars_dir() -> str:
    """The Spark jars of the installed PySpark (Spark's network library, Scala and Netty)."""
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not jars.is_dir():
        raise FileNotFoundError(f"pyspark at {jars.parent} has no jars/ (pyspark-client cannot run the service)")
    return str(jars)


# What Spark's launcher gives every Spark JVM for Spark's network library and Netty on Java 17
# (Spark's JavaModuleOptions): without them Netty cannot use its own selected-keys set or create
# direct buffers without a Cleaner, and takes slower paths than in the executors.
SPARK_NETWORK_JAVA_OPTIONS = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.type=pooled",
)


def service_command(args: Sequence[str], environ: Mapping[str, str] = os.environ) -> List[str]:
    """The command that runs the service with ``args`` (``--properties-file``, ``--conf KEY=VALUE``,
    ``--host``, or ``--status HOST:PORT``): the JVM options Spark gives its network library
    (:data:`SPARK_NETWORK_JAVA_OPTIONS`), then ``SLUICE_SERVICE_JAVA_OPTS`` (default
    ``-Xmx512m``)."""
    opts = environ.get("SLUICE_SERVICE_JAVA_OPTS", "-Xmx512m").split()
    classpath = os.pathsep.join([jar_path(), os.path.join(spark_jars_dir(), "*")])
    return [java_binary(environ), *SPARK_NETWORK_JAVA_OPTIONS, *opts, "-cp", classpath, MAIN_CLASS, *args]
