"""`sluice doctor` on spark-defaults.conf files with each problem a deployment meets: every one
named with its setting and its fix, the exit status telling errors from warnings; the JVM's own
refusals agree with the doctor's (the same generated rules); and `sluice.doctor` on a live
session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import pytest
import sluice
from sluice import _doctor as doctor
from sluice.config import PLUGIN, SHUFFLE_DATA_IO, SHUFFLE_MANAGER

SLUICE_ON = {
    "spark.shuffle.manager": SHUFFLE_MANAGER,
    "spark.plugins.defaultList": PLUGIN,
    "spark.driver.extraClassPath": "/opt/sluice/sluice.jar",
    "spark.executor.extraClassPath": "/opt/sluice/sluice.jar",
    "spark.authenticate": "true",
    "spark.network.crypto.enabled": "true",
}


def write_defaults(directory: Path, settings: Dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "spark-defaults.conf"
    path.write_text("# written by test_doctor\n" + "".join(f"{k} {v}\n" for k, v in settings.items()))
    return path


@pytest.fixture(autouse=True)
def this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test machine's open-files limit and file systems stay out of the findings (each is
    tested on its own below)."""
    monkeypatch.setattr(doctor, "_open_files_limit", lambda: 1 << 20)
    monkeypatch.setattr(doctor, "_filesystem_type", lambda path: "ext4")


def run(
    tmp_path: Path,
    defaults: Dict[str, str],
    args: Sequence[str] = (),
    capsys: Optional[pytest.CaptureFixture[str]] = None,
) -> Dict[str, Any]:
    """``sluice doctor --json ARGS`` with ``defaults`` as SPARK_CONF_DIR's spark-defaults.conf."""
    conf_dir = tmp_path / "conf"
    write_defaults(conf_dir, defaults)
    assert capsys is not None
    status = doctor.main(["--json", *args], {"SPARK_CONF_DIR": str(conf_dir), "PATH": "/usr/bin"})
    out: Dict[str, Any] = json.loads(capsys.readouterr().out)
    assert status == out["exit_status"]
    return out


def by_setting(out: Dict[str, Any], setting: str) -> List[Dict[str, str]]:
    return [f for f in out["findings"] if setting in f["setting"]]


def one(out: Dict[str, Any], setting: str, severity: str, problem: str, fix: str) -> Dict[str, str]:
    found = [f for f in by_setting(out, setting) if problem in f["problem"]]
    assert len(found) == 1, (setting, problem, out["findings"])
    assert found[0]["severity"] == severity, found[0]
    assert fix in found[0]["fix"], found[0]
    return found[0]


def test_a_clean_cluster_configuration_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(
        tmp_path,
        {**SLUICE_ON, "spark.master": "yarn", "spark.executor.memory": "4g", "spark.executor.memoryOverhead": "1g"},
        ["app.py"],
        capsys,
    )
    assert [f for f in out["findings"] if f["severity"] != "note"] == [], out
    assert out["exit_status"] == 0


def test_what_the_jvm_refuses_is_each_an_error_with_its_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(
        tmp_path,
        {
            **SLUICE_ON,
            "spark.master": "yarn",
            "spark.executor.memoryOverhead": "2g",
            "spark.shuffle.service.enabled": "true",
            "spark.shuffle.push.enabled": "true",
            "spark.dynamicAllocation.enabled": "true",
            "spark.dynamicAllocation.shuffleTracking.enabled": "false",
            "spark.io.compression.codec": "brotli",
            "spark.io.encryption.enabled": "true",
            "spark.io.crypto.cipher.transformation": "AES/GCM/NoPadding",
            "spark.storage.decommission.enabled": "true",
            "spark.storage.decommission.fallbackStorage.path": "s3a://bucket/fallback/",
            "spark.sluice.memory.segmentSize": "48k",
            "spark.sluice.network.bufersPerChannel": "4",
            "spark.sluice.network.maxFrameLength": "32k",
        },
        ["app.py"],
        capsys,
    )
    assert out["exit_status"] == doctor.EXIT_ERRORS
    one(
        out,
        "spark.shuffle.service.enabled",
        "error",
        "external shuffle service",
        "--conf spark.shuffle.service.enabled=false",
    )
    one(out, "spark.shuffle.push.enabled", "error", "push-based shuffle", "Set spark.shuffle.push.enabled=false")
    one(
        out,
        "spark.dynamicAllocation.shuffleTracking.enabled",
        "error",
        "without a shuffle service",
        "spark.dynamicAllocation.shuffleTracking.enabled=true",
    )
    one(out, "spark.io.compression.codec", "error", "codec=brotli", "use lz4, lzf, snappy or zstd")
    one(
        out, "spark.io.crypto.cipher.transformation", "error", "AES/GCM/NoPadding is not supported", "AES/CTR/NoPadding"
    )
    one(out, "spark.storage.decommission.fallbackStorage.path", "error", "fallback storage", "SluiceShuffleDataIO")
    one(out, "spark.sluice.memory.segmentSize", "error", "not a power of two", "docs/configuration.md")
    one(
        out,
        "spark.sluice.network.bufersPerChannel",
        "error",
        "did you mean spark.sluice.network.buffersPerChannel",
        "key",
    )
    # The rules between options, on the valid ones (the segment size is not: the default applies).
    one(out, "spark.sluice.*", "error", "spark.sluice.network.maxFrameLength: must be at least", "Raise")


def test_the_jvm_refuses_what_the_doctor_names(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same generated rules on both sides: each refused setting's line in the doctor's report is a
    line of the JVM's own start-up refusal (SparkFeatureCheck, through Sluice's shuffle manager,
    constructed in the test session's driver JVM with these settings)."""
    settings = {
        "spark.shuffle.service.enabled": "true",
        "spark.io.compression.codec": "brotli",
        "spark.storage.decommission.enabled": "true",
        "spark.storage.decommission.fallbackStorage.path": "/tmp/fallback",
        "spark.master": "yarn",
        "spark.executor.memoryOverhead": "1g",
    }
    out = run(tmp_path, {**SLUICE_ON, **settings}, [], capsys)
    refused = [f["problem"] + " " + f["fix"] for f in out["findings"] if f["severity"] == "error"]
    assert len(refused) == 3, out
    jvm = spark.sparkContext._jvm
    conf = jvm.org.apache.spark.SparkConf(False)
    for key, value in settings.items():
        conf.set(key, value)
    with pytest.raises(Exception) as refusal:
        jvm.org.apache.spark.shuffle.sluice.SluiceShuffleManager(conf, True)
    message = str(refusal.value)
    for line in refused:
        assert line in message, (line, message)


def test_what_will_hurt_is_each_a_warning_with_its_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A Python application on Kubernetes with the overhead a JVM application would get (0.10 x 4g).
    k8s = run(
        tmp_path / "k8s",
        {
            **SLUICE_ON,
            "spark.master": "k8s://https://kube:6443",
            "spark.executor.memory": "4g",
            "spark.executor.memoryOverhead": "480m",
            "spark.kubernetes.local.dirs.tmpfs": "true",
        },
        ["app.py"],
        capsys,
    )
    overhead = one(
        k8s, "spark.executor.memoryOverhead", "warning", "1638 MiB for a Python application on Kubernetes", "=1702m"
    )
    assert "0.40" in overhead["problem"] and "OOMKilled" in overhead["problem"]
    one(k8s, "spark.kubernetes.local.dirs.tmpfs", "warning", "in memory", "tmpfs=false")
    assert k8s["exit_status"] == doctor.EXIT_WARNINGS
    # The same heap for a JVM application: Spark's own 0.10 (409 MiB) plus Sluice's 64 MiB.
    jvm = run(
        tmp_path / "jvm",
        {**SLUICE_ON, "spark.master": "k8s://https://kube:6443", "spark.executor.memory": "4g"},
        ["--class", "com.example.Main", "app.jar"],
        capsys,
    )
    one(jvm, "spark.executor.memoryOverhead", "warning", "Spark's default for a JVM application", "=473m")

    # YARN: the platform's defaults file sets Sluice's jar and plugin in the lists users replace.
    yarn = {
        "spark.master": "yarn",
        "spark.shuffle.manager": SHUFFLE_MANAGER,
        "spark.jars": "/opt/sluice/sluice.jar",
        "spark.plugins": PLUGIN,
        "spark.executor.memoryOverhead": "2g",
        "spark.sluice.network.port": "7340",
    }
    as_is = run(tmp_path / "yarn", yarn, ["app.py"], capsys)
    one(as_is, "spark.jars", "warning", "replaces that list", "spark.executor.extraClassPath")
    one(as_is, "spark.plugins", "warning", "replaces it", "spark.plugins.defaultList")
    one(as_is, "spark.authenticate", "warning", "serves any shuffle partition", "spark.authenticate=true")
    port = one(as_is, "spark.sluice.network.port", "note", "at most 17 Sluice executors", "spark.port.maxRetries")
    assert "7340-7356" in port["problem"]
    crowded = run(tmp_path / "crowded", yarn, ["--executors-per-node", "24", "app.py"], capsys)
    one(crowded, "spark.sluice.network.port", "error", "but 24 are expected", "spark.port.maxRetries")
    # A user's --jars and --conf spark.plugins= replace the file's lists.
    replaced = run(
        tmp_path / "replaced",
        yarn,
        ["--jars", "/home/me/udfs.jar", "--conf", "spark.plugins=com.example.Plugin", "app.py"],
        capsys,
    )
    one(replaced, "spark.jars", "error", "--jars (or --conf spark.jars=) replaced", "extraClassPath")
    one(replaced, "spark.plugins", "warning", "--conf spark.plugins= replaced", "spark.plugins.defaultList")

    # Security combinations on a standalone cluster.
    standalone = run(
        tmp_path / "standalone",
        {
            **{k: v for k, v in SLUICE_ON.items() if not k.startswith(("spark.authenticate", "spark.network"))},
            "spark.master": "spark://10.0.0.1:7077",
            "spark.network.crypto.enabled": "true",
            "spark.ssl.rpc.enabled": "true",
        },
        [],
        capsys,
    )
    one(standalone, "spark.network.crypto.enabled", "warning", "has no effect", "spark.authenticate=true")
    one(standalone, "spark.ssl.rpc.enabled", "error", "without spark.ssl.rpc.keyStore", "spark.ssl.rpc.keyStore")
    one(standalone, "spark.ssl.rpc.enabled", "warning", "any TLS client", "spark.authenticate=true")
    secretless = run(
        tmp_path / "secretless",
        {**SLUICE_ON, "spark.master": "spark://10.0.0.1:7077"},
        [],
        capsys,
    )
    one(secretless, "spark.authenticate", "error", "without spark.authenticate.secret", "spark.authenticate.secret")


def test_shuffle_tracking_beside_the_node_service_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = {
        **SLUICE_ON,
        "spark.master": "yarn",
        "spark.executor.memoryOverhead": "1g",
        "spark.shuffle.sort.io.plugin.class": SHUFFLE_DATA_IO,
        "spark.sluice.service.enabled": "true",
        "spark.dynamicAllocation.enabled": "true",
    }
    kept = run(tmp_path / "default", service, ["app.py"], capsys)
    one(
        kept,
        "spark.dynamicAllocation.shuffleTracking.enabled",
        "warning",
        "on (Spark's default): Spark still keeps every executor that holds map outputs",
        "spark.dynamicAllocation.shuffleTracking.enabled=false",
    )
    assert kept["exit_status"] == doctor.EXIT_WARNINGS
    off = {**service, "spark.dynamicAllocation.shuffleTracking.enabled": "false"}
    released = run(tmp_path / "off", off, ["app.py"], capsys)
    assert by_setting(released, "shuffleTracking") == [], released["findings"]
    assert released["exit_status"] == 0, released["findings"]


def test_local_dirs_and_open_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = run(
        tmp_path,
        {**SLUICE_ON, "spark.master": "local[2]", "spark.local.dir": str(tmp_path / "missing")},
        [],
        capsys,
    )
    one(out, "spark.local.dir", "error", "does not exist", "Create it")
    c = doctor.from_command_line(
        ["--master", "spark://h:7077", "--conf", f"spark.shuffle.manager={SHUFFLE_MANAGER}"], {}
    )
    [fd] = doctor.check_file_descriptors(c, 1024)
    assert fd.severity == "warning" and "4096 partition files" in fd.problem and "at least 5120" in fd.fix
    assert doctor.check_file_descriptors(c, 65536) == []
    monkeypatch.setattr(doctor, "_filesystem_type", lambda path: "tmpfs")
    in_memory = doctor.from_command_line(["--master", "local[2]", "--conf", f"spark.local.dir={tmp_path}"], {})
    [tmpfs] = doctor.check_local_dirs(in_memory, {})
    assert tmpfs.severity == "warning" and "is a tmpfs" in tmpfs.problem and "local disk" in tmpfs.fix


def test_an_application_without_sluice_is_told_how_to_switch_it_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(tmp_path, {"spark.master": "local[2]"}, ["app.py"], capsys)
    one(out, "spark.shuffle.manager", "error", "Sluice is not switched on", "sluice conf --format properties")
    # As `sluice submit` would run it, with Sluice's own settings merged in.
    merged = run(tmp_path, {"spark.master": "local[2]"}, ["--submit", "--buffer-timeout", "10ms", "app.py"], capsys)
    assert not [f for f in merged["findings"] if f["severity"] == "error"], merged


def test_the_report_and_its_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf_dir = tmp_path / "conf"
    write_defaults(conf_dir, {**SLUICE_ON, "spark.master": "yarn", "spark.shuffle.service.enabled": "true"})
    status = doctor.main(["app.py"], {"SPARK_CONF_DIR": str(conf_dir)})
    text = capsys.readouterr().out
    assert status == 1
    assert text.startswith("sluice doctor: 1 error(s), ")
    assert str(conf_dir / "spark-defaults.conf") in text.splitlines()[0]
    assert (
        "ERROR   spark.shuffle.service.enabled\n" in text
        and "        fix: Set spark.shuffle.service.enabled=false" in text
    )
    assert max(len(line) for line in text.splitlines()[1:]) <= doctor.WIDTH
    # --properties-file replaces spark-defaults.conf, as in spark-submit.
    props = tmp_path / "job.conf"
    props.write_text("".join(f"{k}={v}\n" for k, v in {**SLUICE_ON, "spark.master": "local[2]"}.items()))
    assert doctor.main(["--properties-file", str(props), "app.py"], {"SPARK_CONF_DIR": str(conf_dir)}) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit, match="--port is ambiguous here; use --sluice-port"):
        doctor.main(["--submit", "--port", "7070", "app.py"], {})
    with pytest.raises(SystemExit, match="only go with --submit"):
        doctor.main(["--buffer-timeout", "10ms", "app.py"], {})


def test_a_live_session(spark: Any) -> None:
    findings = sluice.doctor(spark)
    assert all(isinstance(f, sluice.Finding) for f in findings)
    assert not [f for f in findings if f.severity == "error"], findings
