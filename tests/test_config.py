"""sluice.configure and sluice.config.spark_conf against a real SparkSession.builder; no session
is started (except, in a separate process, the SparkContext of the "already running" test)."""

from __future__ import annotations

import datetime
import subprocess
import sys
import textwrap
from typing import Dict

import pytest
import sluice
from pyspark.sql import SparkSession
from sluice.config import PIPELINED_SHUFFLE_MANAGER, PLUGIN, SHUFFLE_MANAGER, spark_conf

# sluice.configure refuses to run beside a SparkContext in this process.
pytestmark = pytest.mark.usefixtures("without_spark_context")


def options_of(builder: SparkSession.Builder) -> Dict[str, str]:
    return {key: str(value) for key, value in builder._options.items()}


def test_configure_returns_the_builder_set_up_for_sluice() -> None:
    builder = SparkSession.builder
    assert sluice.configure(builder) is builder
    opts = options_of(builder)
    assert opts["spark.jars"] == sluice.jar_path()
    assert opts["spark.shuffle.manager"] == SHUFFLE_MANAGER
    assert opts["spark.shuffle.manager.incremental"] == PIPELINED_SHUFFLE_MANAGER
    assert opts["spark.plugins"] == PLUGIN
    # Spark's metric names stay the application's: Sluice's metrics are a source of their own.
    assert not any(key.startswith("spark.metrics.") for key in opts)


def test_options_land_under_their_keys() -> None:
    builder = sluice.configure(
        SparkSession.builder,
        buffer_timeout="10ms",
        buffers_per_channel=4,
        segment_size="64k",
        credit_based=False,
        latency_tracking_granularity="SUBTASK",
    )
    opts = options_of(builder)
    assert opts["spark.sluice.bufferTimeout"] == "10ms"
    assert opts["spark.sluice.network.buffersPerChannel"] == "4"
    assert opts["spark.sluice.memory.segmentSize"] == "64k"
    assert opts["spark.sluice.network.creditBased"] == "false"
    assert opts["spark.sluice.latencyTracking.granularity"] == "subtask"


def test_spark_jars_and_plugins_are_appended_to() -> None:
    builder = SparkSession.builder.config("spark.jars", "/opt/a.jar,/opt/b.jar").config(
        "spark.plugins", "com.example.Plugin"
    )
    opts = options_of(sluice.configure(builder))
    assert opts["spark.jars"] == f"/opt/a.jar,/opt/b.jar,{sluice.jar_path()}"
    assert opts["spark.plugins"] == f"com.example.Plugin,{PLUGIN}"


def test_configuring_twice_does_not_repeat_list_entries() -> None:
    builder = sluice.configure(sluice.configure(SparkSession.builder))
    opts = options_of(builder)
    assert opts["spark.jars"] == sluice.jar_path()
    assert opts["spark.plugins"] == PLUGIN


def test_the_node_service_turns_spark_shuffle_tracking_off_unless_the_user_set_it() -> None:
    tracking = "spark.dynamicAllocation.shuffleTracking.enabled"
    assert spark_conf(service_enabled=True)[tracking] == "false"
    assert tracking not in spark_conf() and tracking not in spark_conf(service_enabled=False)
    assert options_of(sluice.configure(SparkSession.builder, service_enabled=True))[tracking] == "false"
    # A value already on the builder is the user's choice.
    kept = sluice.configure(SparkSession.builder.config(tracking, "true"), service_enabled=True)
    assert options_of(kept)[tracking] == "true"


def test_a_metrics_namespace_the_user_chose_is_kept() -> None:
    builder = SparkSession.builder.config("spark.metrics.namespace", "mine")
    assert options_of(sluice.configure(builder))["spark.metrics.namespace"] == "mine"


def test_prometheus_switches_on_the_servlet() -> None:
    opts = options_of(sluice.configure(SparkSession.builder, prometheus=True))
    servlet = "org.apache.spark.metrics.sink.PrometheusServlet"
    for instance in ("driver", "executor"):  # named, not `*`: no glob in `sluice conf`'s output
        assert opts[f"spark.metrics.conf.{instance}.sink.prometheusServlet.class"] == servlet
        assert opts[f"spark.metrics.conf.{instance}.sink.prometheusServlet.path"] == "/metrics/prometheus"


def test_spark_conf_matches_configure() -> None:
    conf = spark_conf(buffer_timeout="1s", prometheus=True)
    assert conf == options_of(sluice.configure(SparkSession.builder, buffer_timeout="1s", prometheus=True))
    assert all(isinstance(v, str) for v in conf.values())


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("buffer_timout", "buffer_timeout"),
        ("bufferTimeout", "buffer_timeout"),
        ("segmentsize", "segment_size"),
    ],
)
def test_unknown_option_is_named_and_the_closest_suggested(name: str, suggestion: str) -> None:
    with pytest.raises(ValueError) as e:
        sluice.configure(SparkSession.builder, **{name: "1"})
    assert repr(name) in str(e.value)
    assert f"did you mean {suggestion!r}" in str(e.value)


def test_unknown_option_without_a_close_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid options: segment_size, "):
        spark_conf(zzz=1)


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [
        # int
        ("buffers_per_channel", "spark.sluice.network.buffersPerChannel", "four"),
        ("buffers_per_channel", "spark.sluice.network.buffersPerChannel", 2.5),
        ("buffers_per_channel", "spark.sluice.network.buffersPerChannel", True),
        ("buffers_per_channel", "spark.sluice.network.buffersPerChannel", 0),
        ("buffers_per_channel", "spark.sluice.network.buffersPerChannel", 1025),
        ("port", "spark.sluice.network.port", 2**40),
        # boolean
        ("credit_based", "spark.sluice.network.creditBased", "yes"),
        ("credit_based", "spark.sluice.network.creditBased", 1),
        # bytes
        ("segment_size", "spark.sluice.memory.segmentSize", "32x"),
        ("segment_size", "spark.sluice.memory.segmentSize", -4096),
        ("segment_size", "spark.sluice.memory.segmentSize", 5000),
        ("segment_size", "spark.sluice.memory.segmentSize", "2k"),
        ("segment_size", "spark.sluice.memory.segmentSize", "32m"),
        ("segment_size", "spark.sluice.memory.segmentSize", 32.0),
        ("network_memory", "spark.sluice.network.memory", "1k"),
        # duration
        ("buffer_timeout", "spark.sluice.bufferTimeout", "10 parsecs"),
        ("buffer_timeout", "spark.sluice.bufferTimeout", "-2ms"),
        ("buffer_timeout", "spark.sluice.bufferTimeout", datetime.timedelta(microseconds=1500)),
        ("buffer_timeout", "spark.sluice.bufferTimeout", 1.5),
        ("connect_timeout", "spark.sluice.network.connectTimeout", "-1s"),
        ("metrics_report_interval", "spark.sluice.metrics.reportInterval", "5ms"),
        # enum
        ("latency_tracking_granularity", "spark.sluice.latencyTracking.granularity", "per-task"),
        ("latency_tracking_granularity", "spark.sluice.latencyTracking.granularity", 1),
    ],
)
def test_bad_value_names_option_key_and_value(name: str, key: str, value: object) -> None:
    with pytest.raises(ValueError) as e:
        sluice.configure(SparkSession.builder, **{name: value})
    message = str(e.value)
    assert name in message and key in message and repr(value) in message


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        (4096, "4k"),
        ("4096", "4k"),
        ("32k", "32k"),
        ("32 KB", "32k"),
        ("1024k", "1m"),
        ("16m", "16m"),
        ("8KiB", "8k"),
    ],
)
def test_sizes_are_normalised(value: object, rendered: str) -> None:
    # A frame must hold a segment and its headers (checked as the JVM does): room for the largest here.
    assert spark_conf(segment_size=value, max_frame_length="32m")["spark.sluice.memory.segmentSize"] == rendered


def test_sizes_above_a_gigabyte() -> None:
    conf = spark_conf(network_memory="2g", max_frame_length=1536 * 1024)
    assert conf["spark.sluice.network.memory"] == "2g"
    assert conf["spark.sluice.network.maxFrameLength"] == "1536k"


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        (100, "100ms"),
        ("100", "100ms"),
        ("100ms", "100ms"),
        ("5s", "5s"),
        ("5000ms", "5s"),
        ("2min", "2min"),
        ("2m", "2min"),
        ("120s", "2min"),
        ("1h", "60min"),
        ("1500us", "1ms"),
        (datetime.timedelta(seconds=5), "5s"),
        (datetime.timedelta(milliseconds=250), "250ms"),
        (0, "0ms"),
        (-1, "-1ms"),
        ("-1ms", "-1ms"),
    ],
)
def test_durations_are_normalised(value: object, rendered: str) -> None:
    assert spark_conf(buffer_timeout=value)["spark.sluice.bufferTimeout"] == rendered


def test_booleans_and_ints_from_text() -> None:
    conf = spark_conf(credit_based="FALSE", buffers_per_channel="8")
    assert conf["spark.sluice.network.creditBased"] == "false"
    assert conf["spark.sluice.network.buffersPerChannel"] == "8"


@pytest.mark.parametrize("not_a_builder", [None, "SparkSession.builder", SparkSession, {"spark.master": "local"}])
def test_configure_rejects_what_is_not_a_builder(not_a_builder: object) -> None:
    with pytest.raises(TypeError) as e:
        sluice.configure(not_a_builder)  # type: ignore[arg-type]
    assert "SparkSession.Builder" in str(e.value)
    assert type(not_a_builder).__qualname__ in str(e.value)


def test_configure_refuses_a_running_spark_context() -> None:
    # In a separate process: a JVM started here without Sluice's jar would stay this process's
    # gateway, and later sessions of the test run could not load Sluice's classes.
    script = textwrap.dedent(
        """
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
        import sluice

        sc = SparkContext(master="local[1]", appName="sluice-test-running-context")
        try:
            sluice.configure(SparkSession.builder)
        except RuntimeError as e:
            print("RuntimeError:", e)
        finally:
            sc.stop()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "RuntimeError:" in done.stdout, done.stdout + done.stderr
    assert "static" in done.stdout and "before" in done.stdout


def test_configure_refuses_a_driver_jvm_started_without_sluice() -> None:
    # A stopped SparkContext leaves its JVM behind, and jars only reach the driver's class path
    # when that JVM starts; a Sluice session in the same process would fail to load its classes.
    script = textwrap.dedent(
        """
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
        import sluice

        SparkContext(master="local[1]", appName="sluice-test-earlier-context").stop()
        try:
            sluice.configure(SparkSession.builder)
        except RuntimeError as e:
            print("RuntimeError:", e)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "RuntimeError:" in done.stdout, done.stdout + done.stderr
    assert "new Python process" in done.stdout


def test_spark_features_sluice_cannot_serve_stop_the_application_at_start() -> None:
    # local-cluster: its executors would wait for an external shuffle service that is not there,
    # which used to hang the application; the driver must refuse before any executor starts.
    script = textwrap.dedent(
        """
        from pyspark.sql import SparkSession
        import sluice

        for key in ("spark.shuffle.service.enabled", "spark.shuffle.push.enabled"):
            builder = SparkSession.builder.master("local-cluster[1,1,512]").config(key, "true")
            try:
                sluice.configure(builder).getOrCreate().stop()
                print("STARTED", key)
            except Exception as e:
                print("REFUSED", key, "::", str(e).replace("\\n", " "))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(("REFUSED", "STARTED"))]
    assert [line.split()[:2] for line in lines] == [
        ["REFUSED", "spark.shuffle.service.enabled"],
        ["REFUSED", "spark.shuffle.push.enabled"],
    ], done.stdout + done.stderr[-4000:]
    assert "Set spark.shuffle.service.enabled=false" in lines[0], lines[0]
    assert "spark.dynamicAllocation.shuffleTracking.enabled=true instead" in lines[0], lines[0]
    assert "Set spark.shuffle.push.enabled=false" in lines[1], lines[1]


def _jvm_verdicts(lines: "list[str]") -> "list[str]":
    """SluiceConf's verdict ('OK' or its message) on each line of key=value settings, in one JVM."""
    import os
    from pathlib import Path

    import pyspark
    from sessions import TEST_JAR

    if not TEST_JAR.is_file():
        raise RuntimeError(f"{TEST_JAR} is missing: build it with `run_gradle testJar` (dev/test does)")
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    classpath = os.pathsep.join([str(TEST_JAR), sluice.jar_path(), f"{jars}/*"])
    done = subprocess.run(
        ["java", "-cp", classpath, "io.sluice.config.TestingConfCheck"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_python_applies_the_jvms_rules_between_options_on_both_sides_of_every_boundary() -> None:
    """Every AtLeast rule of the generated table, just below and at its bound, for several values of
    the option it refers to: sluice.configure's check and SluiceConf's agree, with the same message."""
    from sluice import _options

    table = _options.options()
    by_key = {option.key: option for option in table.values()}
    cases: "list[Dict[str, str]]" = []
    rules = [(option, rule) for option in table.values() for rule in option.at_least]
    assert {(o.python, by_key[r.reference].python) for o, r in rules} >= {
        ("network_memory", "segment_size"),
        ("max_frame_length", "segment_size"),
    }
    for option, rule in rules:
        reference = by_key[rule.reference]
        for ref_value in (reference.default, "64k", "1m"):
            _, ref_bytes = _options._parse_bytes(reference, ref_value)
            assert ref_bytes is not None
            least = rule.factor * ref_bytes + rule.plus
            for value in (least - 1, least):
                try:
                    _options.render(option, value)  # valid on its own, so only the rule decides
                except ValueError:
                    continue
                cases.append({rule.reference: ref_value, option.key: _options.render(option, value)})
    assert len(cases) >= 8
    jvm = _jvm_verdicts([" ".join(f"{k}={v}" for k, v in case.items()) for case in cases])
    for case, verdict in zip(cases, jvm):
        try:
            _options.check_combinations(case)
            python = "OK"
        except ValueError as e:
            python = str(e).split(" (Sluice options ")[0]
        assert python == verdict, case
    assert sum(v == "OK" for v in jvm) and sum(v != "OK" for v in jvm)  # both sides were reached


def test_configure_refuses_a_segment_larger_than_a_frame_set_too_small_before_spark_starts() -> None:
    # Left at its default, the frame length rises with the segment size (as SluiceConf raises it).
    assert "spark.sluice.network.maxFrameLength" not in spark_conf(segment_size="1m")
    with pytest.raises(ValueError, match=r"spark\.sluice\.network\.maxFrameLength: must be at least") as refused:
        spark_conf(segment_size="1m", max_frame_length="1m")
    assert "max_frame_length and segment_size" in str(refused.value)
    assert spark_conf(segment_size="1m", max_frame_length="2m")["spark.sluice.network.maxFrameLength"] == "2m"
    with pytest.raises(ValueError, match="two segments"):
        spark_conf(segment_size="64k", network_memory="64k")
