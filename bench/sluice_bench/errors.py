"""Errors of the benchmarks: one that stops a benchmark, one that voids its numbers."""

from __future__ import annotations


class BenchError(RuntimeError):
    """A benchmark could not run (a contender's application failed, a tool is missing)."""


class MismatchError(RuntimeError):
    """Sluice's answers differ from the reference's: the benchmark's numbers are void."""
