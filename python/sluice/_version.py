"""The version of Sluice: the installed distribution's, or the VERSION file of a source checkout."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path


def _read_version() -> str:
    parents = Path(__file__).resolve().parents
    repo = parents[2] if len(parents) > 2 else None
    if repo is not None and (repo / "build.gradle").is_file() and (repo / "VERSION").is_file():
        return (repo / "VERSION").read_text(encoding="utf-8").strip()
    try:
        return metadata.version("spark-sluice")
    except metadata.PackageNotFoundError:
        return "0+unknown"


__version__: str = _read_version()
