"""Where the Sluice JVM plugin jar is: inside the installed package, or in a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def jar_path() -> str:
    """Returns the absolute path of the Sluice plugin jar.

    An installed Sluice carries it as ``sluice/jars/sluice.jar``. Running from a source checkout
    without it, the jar Gradle built under ``<repo>/build/libs`` is used instead.

    Raises:
        FileNotFoundError: when neither exists.
    """
    bundled = _PACKAGE_DIR / "jars" / "sluice.jar"
    if bundled.is_file():
        return str(bundled)
    repo = _PACKAGE_DIR.parent.parent
    if (repo / "build.gradle").is_file():
        built = _checkout_jar(repo)
        if built is not None:
            return str(built)
    raise FileNotFoundError(
        f"The Sluice plugin jar is missing: neither {bundled} nor a build/libs/sluice-*.jar of a "
        "source checkout exists. Install Sluice with `pip install .` from the repository (or run "
        "dev/build), which builds the jar with Gradle and bundles it."
    )


def _checkout_jar(repo: Path) -> Path | None:
    libs = repo / "build" / "libs"
    version_file = repo / "VERSION"
    if version_file.is_file():
        exact = libs / f"sluice-{version_file.read_text(encoding='utf-8').strip()}.jar"
        if exact.is_file():
            return exact
    candidates = sorted(libs.glob("sluice-*.jar"), key=lambda p: p.stat().st_mtime)
    return candidates[-1] if candidates else None
