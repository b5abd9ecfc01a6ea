"""A vm cell's service logs, read through its guest agent: hostile input in bounded pieces.

The supervisor in the guest appends each service's output to `SERVICE_LOG_DIR/<service>.log`
on the machine's own disk (backends/supervisor.py), so `devcell logs` reads it there: each
round opens one connection to the agent, asks the guest's busybox for the type and size of
the log directory and of each service's file (`stat`, one `guest-exec` for all of them), then
reads what is new with `guest-file-open/seek/read/close`, at most READ_MAX bytes a request.
Only the services the cell's spec names are read (never names from a guest listing).

Root in the guest can put anything there or on the agent's port. A log (or the directory)
that is not a regular file is refused as the container backend refuses it (a link to
/dev/zero, a FIFO whose open would hang the agent); the size the guest claims only bounds
what is asked; what comes back is decoded from at most the base64 the asked count needs and
cut to it, so a lying agent costs a BackendError, never unbounded memory. A file swapped for a
FIFO between the stat and the open can still hang the guest's agent: then the request times
out, a BackendError naming the cell.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from devcell import names, safeio
from devcell.backends.log_source import LogSource
from devcell.backends.vm.drivers.qmp import file_handle, said
from devcell.errors import BackendError
from devcell.security import SERVICE_LOG_DIR

READ_MAX = 1 << 20
"""Bytes asked of the agent per guest-file-read (its reply is about 4/3 of it, in base64)."""
BUSYBOX = "/.devcell-guest/busybox"
STAT_FORMAT = "%F|%s|%n"
_SIZE_MAX = 1 << 62
GONE_SECONDS = 2.0
"""How long a machine whose agent connection failed is watched for its end before the failure
is the connection's: a QEMU that quits (a sleep ends it) resets its sockets a moment before
its process is gone."""

Run = Callable[[Any, list[str]], tuple[int, bytes, bytes]]
"""Runs a command in the guest through the given agent: (exit status, stdout, stderr)."""


@dataclass(frozen=True)
class Found:
    """What the guest's stat said of one path: its type (stat's %F words) and size."""

    kind: str
    size: int

    @property
    def regular(self) -> bool:
        return self.kind in ("regular file", "regular empty file")


def parse_stat(out: bytes, asked: list[str]) -> dict[str, Found]:
    """`stat -c STAT_FORMAT` output for the `asked` paths; lines naming anything else, or
    malformed, are dropped (the guest's word: a path missing from it is taken as absent)."""
    found: dict[str, Found] = {}
    for line in out.decode("utf-8", "replace").splitlines()[:2 * len(asked)]:
        kind, _, rest = line.partition("|")
        size, _, path = rest.partition("|")
        if path in asked and size.isdigit() and len(size) < 19 and len(kind) < 40:
            found[path] = Found(kind, min(int(size), _SIZE_MAX))
    return found


def decoded(reply: Any, count: int) -> tuple[bytes, bool]:
    """(data, eof) from guest-file-read's reply to a request for `count` bytes."""
    if not isinstance(reply, dict):
        raise BackendError(f"the guest agent answered guest-file-read with {said(reply)}, "
                           "not an object")
    text = reply.get("buf-b64", "")
    if not isinstance(text, str) or len(text) > 4 * -(-count // 3):
        raise BackendError(f"the guest agent sent more than the {count} bytes asked, or "
                           "not as text")
    try:
        data = base64.b64decode(text, validate=True)[:count]
    except (binascii.Error, ValueError):
        raise BackendError("the guest agent sent a file's bytes that are not base64") from None
    return data, reply.get("eof") is True


class GuestLogs:
    """A running vm cell's service logs (a log_source.ServiceLogs)."""

    def __init__(self, cell_name: str, services: list[str], *,
                 agent: Callable[[], contextlib.AbstractContextManager[Any]], run: Run,
                 running: Callable[[], bool] = lambda: True,
                 directory: str = SERVICE_LOG_DIR) -> None:
        self.cell_name = cell_name
        self.running = running
        self.directory = directory
        self._connect, self._run = agent, run
        self._agent: Any = None
        self._found: dict[str, Found] = {}
        self.sources: dict[str, LogSource] = {
            name: GuestLog(self, name) for name in services}

    def path(self, service: str) -> str:
        return f"{self.directory}/{service}.log"

    @contextlib.contextmanager
    def round(self) -> Iterator[None]:
        """One agent connection; a machine that stopped meanwhile (slept, stopped, deleted:
        what a follow meets) is said as such rather than as a lost connection."""
        try:
            with self._connect() as agent:
                self._agent = agent
                try:
                    self._found = self._survey()
                    yield
                finally:
                    self._agent = None
        except BackendError:
            if self._still_running():
                raise
            raise BackendError(f"cell {self.cell_name} is no longer running (asleep, stopped "
                               "or deleted): its logs cannot be read until it runs again"
                               ) from None

    def _still_running(self) -> bool:
        """Whether the machine runs on after its agent failed, asked until GONE_SECONDS have
        passed: a follow that met a sleep's end of QEMU says the cell is asleep, not that
        the connection was reset."""
        deadline = time.monotonic() + GONE_SECONDS
        while self.running():
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        pass

    def _survey(self) -> dict[str, Found]:
        """The directory's and every log's type and size, by one stat in the guest."""
        asked = [self.directory, *(self.path(name) for name in self.sources)]
        code, out, err = self._run(self._agent, [BUSYBOX, "stat", "-c", STAT_FORMAT, *asked])
        found = parse_stat(out, asked)
        if code != 0 and not found:
            missing = err.decode("utf-8", "replace")
            if "No such file" not in missing:
                raise BackendError(f"cell {self.cell_name}: cannot look at its service logs "
                                   f"in the machine: {said(missing.strip())}")
        return found

    def state(self, service: str) -> Found | None:
        """The log's type and size this round; UnsafeFile when it (or the directory) is not
        what a log is."""
        where = self._found.get(self.directory)
        if where is not None and where.kind != "directory":
            raise safeio.UnsafeFile(f"{self.directory} in cell {self.cell_name} is "
                                    f"{names.printable(where.kind)}, not a directory; not read")
        found = self._found.get(self.path(service))
        if found is not None and not found.regular:
            raise safeio.UnsafeFile(f"{service}.log in cell {self.cell_name} is "
                                    f"{names.printable(found.kind)}; not read")
        return found

    def read(self, service: str, offset: int, limit: int) -> bytes:
        """At most `limit` bytes of the service's log from `offset`, READ_MAX a request."""
        agent = self._agent
        if agent is None:
            raise BackendError("a vm cell's log is read inside a round")
        handle = file_handle(agent.command("guest-file-open", path=self.path(service), mode="r"))
        try:
            agent.command("guest-file-seek", handle=handle, offset=offset, whence="set")
            chunks: list[bytes] = []
            while limit > 0:
                count = min(limit, READ_MAX)
                data, eof = decoded(agent.command("guest-file-read", timeout=60.0,
                                                  handle=handle, count=count), count)
                chunks.append(data)
                limit -= len(data)
                if eof or len(data) < count:
                    break
            return b"".join(chunks)
        finally:
            agent.command("guest-file-close", handle=handle)


class GuestLog:
    """One service's log in the guest (a log_source.LogSource)."""

    block = READ_MAX

    def __init__(self, logs: GuestLogs, service: str) -> None:
        self.logs, self.service = logs, service
        self.label = f"{service}.log"

    def size(self) -> int | None:
        found = self.logs.state(self.service)
        return None if found is None else found.size

    def read(self, offset: int, limit: int) -> bytes:
        return self.logs.read(self.service, offset, limit)

    def release(self) -> None:
        """Nothing held: each read opens and closes its guest file."""
