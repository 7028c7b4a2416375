"""docs/troubleshooting.md lists only messages Sluice can print: every message heading's literal text
(between its ``<...>`` placeholders) is in the JVM's or the Python package's sources."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "troubleshooting.md"

# A string literal continued on the next line: `"... " +\n  s"...` (Scala) or `"... "\n  f"...` (Python).
_CONTINUED = re.compile(r"\"\s*\+?\s*\n\s*[sf]?\"")
_PLACEHOLDER = re.compile(r"<[^>]*>")


def sources() -> str:
    files = sorted((REPO / "jvm" / "src" / "main" / "scala").rglob("*.scala"))
    files += sorted((REPO / "python" / "sluice").glob("*.py"))
    return "\n".join(_CONTINUED.sub("", f.read_text(encoding="utf-8")) for f in files)


def listed_messages() -> List[str]:
    headings = [line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("### ")]
    return [message for heading in headings for message in re.findall(r"`([^`]+)`", heading)]


def not_in(code: str, messages: List[str]) -> List[str]:
    """The literal fragments of ``messages`` (4 characters or more) that ``code`` does not hold."""
    missing = []
    for message in messages:
        for fragment in _PLACEHOLDER.split(message):
            if len(fragment.strip()) >= 4 and fragment not in code:
                missing.append(f"{fragment!r} of {message!r}")
    return missing


def test_every_listed_message_is_in_the_code() -> None:
    messages = listed_messages()
    assert len(messages) >= 30, messages
    missing = not_in(sources(), messages)
    assert not missing, "\n".join(missing)


def test_the_check_notices_a_message_that_is_not_in_the_code() -> None:
    code = sources()
    assert not_in(code, ["Could not connect to the Sluice server at <host>:<port>"]) == []
    assert not_in(code, ["Could not connect to the Sluice cluster at <host>"]) == [
        "'Could not connect to the Sluice cluster at ' of 'Could not connect to the Sluice cluster at <host>'"
    ]


def test_the_refusals_and_setting_errors_are_all_listed() -> None:
    """The messages a user meets first (bad settings, refused Spark settings, the version check)."""
    listed = " ".join(listed_messages())
    for prefix in (
        "Unknown Sluice option",
        "Invalid value",
        "Unknown Sluice setting",
        "cannot run with",
        "was built for Spark",
        "Sluice cannot compress buffers",
        "in Spark's fallback storage, but this executor has none",
        "sluice.configure cannot switch on Sluice",
        "A SparkContext is already running",
        "must be at least",
    ):
        assert prefix in listed, prefix
