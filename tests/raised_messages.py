"""The messages Sluice's code raises, read from its sources, for ``tests/test_troubleshooting.py``.

A *site* is one place that builds an exception's message:

* Scala (``jvm/src/main/scala``): ``new SomethingException(...)`` / ``new SomethingError(...)``,
  ``extends SomethingException(...)`` (an exception class of Sluice's that builds its own message)
  and ``require(condition, message)`` (which throws ``IllegalArgumentException("requirement
  failed: " + message)``).
* Python (``python/sluice``): a call of a name ending in ``Error`` or ``Exception``, or of
  ``SystemExit``.

Its message is the first argument when that is a string: string literals joined by ``+``, with
every interpolation (``$x``, ``${...}``, ``{x}`` in an f-string) and every other operand read as
:data:`HOLE`. A site whose first argument is not a string (``new IOException(e.getMessage, e)``,
``throw new IllegalArgumentException(why)``) carries a message built elsewhere: its ``message`` is
None and ``expression`` holds the argument's source text.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
HOLE = "\x00"

_CONSTRUCTION = re.compile(
    r"\bnew\s+(?P<new>[\w.]*(?:Exception|Error))\s*\(|\bextends\s+(?P<extends>[\w.]*(?:Exception|Error))\s*\("
    r"|(?<![\w.])(?P<require>require)\s*\("
)
_INTERPOLATION = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_]\w*")
_CLASS = re.compile(r"\bclass\s+(\w+)")


@dataclass(frozen=True)
class Site:
    """One place that raises a message: its file (relative to the repository), line, exception class,
    the message with every interpolation as :data:`HOLE` (None when not a string), the first
    argument's source text, and for an ``extends`` clause the exception class it declares."""

    path: str
    line: int
    exception: str
    message: Optional[str]
    expression: str
    declares: str = ""

    @property
    def shown(self) -> str:
        """The message as a user reads it in the docs: every interpolation as ``<>``."""
        return (self.message or "").replace(HOLE, "<>")


def _skip_space(src: str, k: int) -> int:
    while k < len(src) and src[k] in " \t\r\n":
        k += 1
    return k


def _scala_string(src: str, i: int) -> Optional[Tuple[str, int]]:
    """The Scala string literal at ``src[i]`` (plain, ``s``, ``f`` or ``raw``, single or triple
    quoted) with interpolations as HOLE, and the index after it; None when none starts there."""
    j = i
    while j < len(src) and src[j].isalpha():
        j += 1
    prefix = src[i:j]
    if j >= len(src) or src[j] != '"' or prefix not in ("", "s", "f", "raw"):
        return None
    interpolated = prefix in ("s", "f")
    if src.startswith('"""', j):
        end = src.index('"""', j + 3)
        body = src[j + 3 : end]
        return (_INTERPOLATION.sub(HOLE, body) if interpolated else body), end + 3
    k, out = j + 1, []
    while k < len(src):
        c = src[k]
        if c == "\\":
            out.append(src[k : k + 2])
            k += 2
        elif c == '"':
            return "".join(out), k + 1
        elif interpolated and c == "$" and src[k + 1] == "$":
            out.append("$")
            k += 2
        elif interpolated and c == "$" and src[k + 1] == "{":
            k = _after_block(src, k + 1)
            out.append(HOLE)
        elif interpolated and c == "$":
            k += 1
            while k < len(src) and (src[k].isalnum() or src[k] == "_"):
                k += 1
            out.append(HOLE)
        else:
            out.append(c)
            k += 1
    raise ValueError(f"unterminated string literal at offset {i}")


def _after_block(src: str, k: int) -> int:
    """The index after the ``{...}`` opening at ``src[k]`` (strings inside it skipped)."""
    depth = 0
    while k < len(src):
        c = src[k]
        if c == '"':
            literal = _scala_string(src, k)
            k = literal[1] if literal else k + 1
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return k + 1
        k += 1
    raise ValueError("unbalanced braces")


def _operand_end(src: str, k: int) -> int:
    """The end of a non-string operand starting at ``src[k]``: the next ``+``, ``,`` or closing
    bracket at its own depth."""
    depth = 0
    while k < len(src):
        c = src[k]
        if c == '"':
            literal = _scala_string(src, k)
            k = literal[1] if literal else k + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return k
            depth -= 1
        elif c in "+," and depth == 0:
            return k
        k += 1
    return k


def _scala_argument(src: str, k: int) -> Tuple[Optional[str], str]:
    """The message of the argument starting at ``src[k]`` (None unless it starts with a string),
    and the argument's source text."""
    start = _skip_space(src, k)
    parts: List[str] = []
    k = start
    while True:
        k = _skip_space(src, k)
        literal = _scala_string(src, k)
        if literal is None and not parts:
            return None, src[start : _operand_end(src, start)].strip()
        if literal is None:
            parts.append(HOLE)
            k = _operand_end(src, k)
        else:
            parts.append(literal[0])
            k = literal[1]
            while src.startswith(".", k):  # "...".stripMargin and the like
                k += 1
                while k < len(src) and (src[k].isalnum() or src[k] == "_"):
                    k += 1
        k = _skip_space(src, k)
        if k < len(src) and src[k] == "+":
            k += 1
            continue
        return "".join(parts), src[start:k].strip()


def scala_sites(path: Path, root: Path = REPO) -> Iterator[Site]:
    src = path.read_text(encoding="utf-8")
    for m in _CONSTRUCTION.finditer(src):
        k = m.end()
        if m.group("require"):
            k = _operand_end(src, k)  # the condition
            if k >= len(src) or src[k] != ",":
                continue  # require(condition) without a message
            k += 1
        message, expression = _scala_argument(src, k)
        name = m.group("new") or m.group("extends") or "IllegalArgumentException (require)"
        line = src.count("\n", 0, m.start()) + 1
        declared = _CLASS.findall(src, 0, m.start()) if m.group("extends") else []
        yield Site(str(path.relative_to(root)), line, name, message, expression, declared[-1] if declared else "")


def _python_message(node: ast.expr) -> Optional[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _python_message(node.left), _python_message(node.right)
        if left is None and right is None:
            return None
        return (HOLE if left is None else left) + (HOLE if right is None else right)
    return None


def python_sites(path: Path, root: Path = REPO) -> Iterator[Site]:
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if not (name.endswith("Error") or name.endswith("Exception") or name == "SystemExit"):
            continue
        first = node.args[0] if node.args else None
        message = None if first is None else _python_message(first)
        expression = "" if first is None else ast.get_source_segment(source, first) or ""
        yield Site(str(path.relative_to(root)), node.lineno, name, message, expression)


def sites(root: Path = REPO) -> List[Site]:
    """Every site of Sluice's Scala main sources and Python package, in file order."""
    found: List[Site] = []
    for path in sorted((root / "jvm" / "src" / "main" / "scala").rglob("*.scala")):
        found += scala_sites(path, root)
    for path in sorted((root / "python" / "sluice").rglob("*.py")):
        found += python_sites(path, root)
    return found


def own_exception_classes(all_sites: List[Site]) -> List[str]:
    """Sluice's exception classes that build their own message (``extends X(s"...")``): their
    constructions need no message of their own."""
    return sorted({s.declares for s in all_sites if s.declares and s.message is not None})
