"""The processes a test started, found from /proc, so a hung test can be stopped with everything it
started (drivers, executors, Workers, servers), and nothing else on the machine is touched.

A process counts as the test's when it descends from this pytest process and did not exist when the
test began; a Spark application's executors descend from its driver (or from the local-cluster
Worker inside it), so they count as well.
"""

from __future__ import annotations

import os
import signal
from typing import Dict, List, Set, Tuple

# A process is its pid and its start time (field 22 of /proc/PID/stat), so a reused pid is not mistaken for it.
Process = Tuple[int, int]


def _table() -> Dict[int, Tuple[int, int]]:
    """pid -> (parent pid, start time) of every process now running."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        # The command name (field 2) is in parentheses and may hold spaces: split after it.
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(root: int = 0) -> Set[Process]:
    """Every process below ``root`` (this process when 0), with its start time."""
    root = root or os.getpid()
    table = _table()
    children: Dict[int, List[int]] = {}
    for pid, (parent, _started) in table.items():
        children.setdefault(parent, []).append(pid)
    found: Set[Process] = set()
    pending = list(children.get(root, []))
    while pending:
        pid = pending.pop()
        found.add((pid, table[pid][1]))
        pending.extend(children.get(pid, []))
    return found


def kill_started_since(before: Set[Process]) -> List[int]:
    """SIGKILLs every descendant of this process not in ``before``, and the process groups such
    processes lead (what they started in a session of their own and left running); returns the
    pids killed."""
    own_group = os.getpgrp()
    killed = []
    for pid, _started in sorted(descendants() - before):
        try:
            group = os.getpgid(pid)
            if group == pid and group != own_group:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return killed
