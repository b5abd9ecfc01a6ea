"""Connections open now to the host's TCP ports (from /proc/net/tcp and tcp6): how idle sleep
sees a published port in use (`docker-proxy` or QEMU's host forward accepted it, so the
accepted socket has the published port as its local port).

Read from the kernel's table of the daemon's own network namespace (the host's), in bounded
amounts; a port seen here is only counted, never connected to.
"""

from __future__ import annotations

import os

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
ESTABLISHED = "01"
MAX_BYTES = 4 * 1024 * 1024


def established(ports: set[int]) -> dict[int, int]:
    """Of `ports`, those with connections established to them: port -> how many."""
    found: dict[int, int] = {}
    if not ports:
        return found
    for table in TABLES:
        for port in _local_ports(table):
            if port in ports:
                found[port] = found.get(port, 0) + 1
    return found


def _local_ports(table: str) -> list[int]:
    try:
        fd = os.open(table, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return []
    chunks = []
    size = 0
    try:
        while size < MAX_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return []
    finally:
        os.close(fd)
    out = []
    for line in b"".join(chunks).decode("ascii", "replace").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != ESTABLISHED:
            continue
        _, _, port = fields[1].rpartition(":")
        try:
            out.append(int(port, 16))
        except ValueError:
            continue
    return out
