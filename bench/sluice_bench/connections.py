"""Counting TCP connections between executors from /proc (Linux): which established
connections run from one executor JVM to another executor's Sluice server port."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

ESTABLISHED = "01"


def parse_proc_net_tcp(text: str) -> Iterator[Tuple[int, int, str, int]]:
    """(local port, remote port, state, inode) of every socket in a /proc/net/tcp{,6} table."""
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
        yield int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16), state, int(inode)


def socket_inodes(pid: int) -> Set[int]:
    """The inodes of the sockets process ``pid`` holds open."""
    inodes: Set[int] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def tcp_table(pid: int) -> List[Tuple[int, int, str, int]]:
    rows: List[Tuple[int, int, str, int]] = []
    for name in ("tcp", "tcp6"):
        try:
            rows.extend(parse_proc_net_tcp(Path(f"/proc/{pid}/net/{name}").read_text()))
        except OSError:
            continue
    return rows


def count_connections(
    table: List[Tuple[int, int, str, int]], inodes: Dict[str, Set[int]], ports: Dict[str, int]
) -> Dict[str, int]:
    """Established connections per ``"client->server"`` executor pair: a socket of the client
    executor (by inode) whose remote port is the server executor's Sluice port."""
    by_port = {port: executor for executor, port in ports.items()}
    counts: Dict[str, int] = {}
    for client in inodes:
        for server in ports:
            if server != client:
                counts[f"{client}->{server}"] = 0
    for _local, remote, state, inode in table:
        if state != ESTABLISHED or remote not in by_port:
            continue
        server = by_port[remote]
        for client, owned in inodes.items():
            if inode in owned and client != server:
                counts[f"{client}->{server}"] = counts.get(f"{client}->{server}", 0) + 1
    return counts


def sluice_connections(pids: Dict[str, int], ports: Dict[str, int]) -> Dict[str, int]:
    """:func:`count_connections` for the live executors ``pids`` (executor id -> pid)."""
    if not pids:
        return {}
    table = tcp_table(next(iter(pids.values())))  # one network namespace: any process's view
    inodes = {executor: socket_inodes(pid) for executor, pid in pids.items()}
    return count_connections(table, inodes, ports)
