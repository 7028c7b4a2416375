"""The machine a benchmark ran on, as its result records it: cores, CPU, memory, load, versions."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Dict, List


def load_average() -> List[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return float("nan")


def java_version() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (done.stderr or done.stdout).splitlines()
    return " / ".join(line.strip() for line in lines[:2]) if lines else "unknown"


def machine() -> Dict[str, Any]:
    """The machine a run is made on: cores, CPU, memory, kernel, Java/Spark/Sluice versions."""
    import pyspark
    import sluice

    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_gib": memory_gib(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "java": java_version(),
        "spark": pyspark.__version__,
        "sluice": sluice.__version__,
    }
