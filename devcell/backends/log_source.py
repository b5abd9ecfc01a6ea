"""Service logs read in pieces: what `devcell logs` asks of a backend.

A container cell's logs are files on the host (beside its workspace volume); a vm cell's stay
on the machine's own disk and are reached through its guest agent. So a backend does not hand
out host paths but one `LogSource` per service: its size now and a bounded read at an offset,
which is all the CLI's tail needs (the last lines, following, a truncated file read again from
the start). Both ends are the cell's to write, so every read is bounded by the caller, a
source that is not a regular file raises `safeio.UnsafeFile` (shown, never read), and the
reads of one turn over all services happen inside `ServiceLogs.round()` (the vm backend talks
to the agent over one connection per round).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from devcell import safeio

HOST_BLOCK = 64 << 10


class LogSource(Protocol):
    """One service's log."""

    label: str
    """How messages name it (its file name)."""
    block: int
    """How much one read fetches well (reading backwards for --tail goes in such blocks)."""

    def size(self) -> int | None:
        """Its size in bytes now; None while it does not exist. UnsafeFile when it is not a
        regular file (a link, a FIFO, a device): nothing of it is read."""
        ...

    def read(self, offset: int, limit: int) -> bytes:
        """At most `limit` bytes from `offset` (fewer at its end)."""
        ...

    def release(self) -> None:
        """Done with it for this turn: what reading held (a host file's descriptor) is let
        go, so a cell with a thousand logs never has them open at once; the next size()
        opens it again."""
        ...


class ServiceLogs(Protocol):
    """Every service's log of one cell, by service name."""

    sources: dict[str, LogSource]

    def round(self) -> contextlib.AbstractContextManager[None]:
        """Around one turn of reads over the sources."""
        ...

    def close(self) -> None:
        ...


class HostLog:
    """A log file on the host in a directory the cell can write: opened through safeio (no
    links, no FIFOs, never blocking) once, then read with pread in bounded amounts."""

    block = HOST_BLOCK

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = path.name
        self.fd: int | None = None

    def size(self) -> int | None:
        if self.fd is None:
            try:
                self.fd = safeio.open_regular(self.path.parent, self.path.name)
            except FileNotFoundError:
                return None
        return os.fstat(self.fd).st_size

    def read(self, offset: int, limit: int) -> bytes:
        assert self.fd is not None, "size() opens the file"
        chunks: list[bytes] = []
        while limit > 0:
            chunk = os.pread(self.fd, min(limit, 1 << 16), offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
            limit -= len(chunk)
        return b"".join(chunks)

    def release(self) -> None:
        self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class HostLogs:
    """The container backend's logs: one host file per service."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.logs = {name: HostLog(path) for name, path in paths.items()}
        self.sources: dict[str, LogSource] = dict(self.logs)

    @contextlib.contextmanager
    def round(self) -> Iterator[None]:
        yield

    def close(self) -> None:
        for log in self.logs.values():
            log.close()
