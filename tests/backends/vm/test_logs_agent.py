"""A vm cell's logs read through a guest agent that may lie (devcell.backends.vm.logs), and
printed by `devcell logs`'s tail: bounded requests, one connection per round, a refused link or
FIFO, a lying reply a BackendError. The agent here is a fake in the test (its guest-file-* and
the stat a real guest's busybox answers); the real guest is in tests/backends/vm/test_logs.py.
"""

from __future__ import annotations

import base64
import contextlib
import io
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from devcell.api import log_lines
from devcell.backends.vm import logs as vm_logs
from devcell.cli.cmd_logs import _Tail
from devcell.errors import BackendError

DIR = "/var/log/devcell"


class FakeGuest:
    """A guest's log directory and the agent that reads it; `bend` alters one reply."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.kinds: dict[str, str] = {DIR: "directory"}
        self.claimed: dict[str, int] = {}
        self.connections = 0
        self.counts: list[int] = []
        self.handles: dict[int, list[Any]] = {}
        self.bend: dict[str, Any] = {}

    @contextlib.contextmanager
    def agent(self) -> Iterator[FakeGuest]:
        self.connections += 1
        yield self

    def run(self, agent: Any, argv: list[str]) -> tuple[int, bytes, bytes]:
        assert argv[:4] == [vm_logs.BUSYBOX, "stat", "-c", vm_logs.STAT_FORMAT]
        out = b""
        for path in argv[4:]:
            kind = self.kinds.get(path) or ("regular file" if path in self.files else None)
            if kind is not None:
                size = self.claimed.get(path, len(self.files.get(path, b"")))
                out += f"{kind}|{size}|{path}\n".encode()
        return 0, out, b""

    def command(self, name: str, timeout: float = 10.0, **args: Any) -> Any:
        if name in self.bend:
            return self.bend[name]
        if name == "guest-file-open":
            handle = len(self.handles) + 1
            self.handles[handle] = [args["path"], 0]
            return handle
        if name == "guest-file-seek":
            self.handles[args["handle"]][1] = args["offset"]
            return {"position": args["offset"], "eof": False}
        if name == "guest-file-read":
            path, pos = self.handles[args["handle"]]
            self.counts.append(args["count"])
            data = self.files[path][pos:pos + args["count"]]
            self.handles[args["handle"]][1] = pos + len(data)
            return {"count": len(data), "buf-b64": base64.b64encode(data).decode(),
                    "eof": len(data) < args["count"]}
        if name == "guest-file-close":
            del self.handles[args["handle"]]
            return {}
        raise AssertionError(name)


@pytest.fixture
def guest() -> FakeGuest:
    return FakeGuest()


def logs_of(guest: FakeGuest, *services: str) -> vm_logs.GuestLogs:
    return vm_logs.GuestLogs("box", list(services), agent=guest.agent, run=guest.run)


class Printed:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.out, self.err = io.BytesIO(), io.StringIO()
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(self.out))
        monkeypatch.setattr(sys, "stderr", self.err)

    def __call__(self) -> bytes:
        sys.stdout.flush()
        return self.out.getvalue()


def turn(logs: vm_logs.GuestLogs, tails: list[_Tail], *, final: bool = False) -> None:
    with logs.round():
        for tail in tails:
            tail.pump(final=final)


def test_a_growing_log_is_followed_and_a_truncated_one_read_again(
        guest: FakeGuest, monkeypatch: pytest.MonkeyPatch) -> None:
    printed = Printed(monkeypatch)
    guest.files[f"{DIR}/web.log"] = b"2026-01-02T03:04:05Z one\n2026-01-02T03:04:06Z tw"
    logs = logs_of(guest, "web")
    tail = _Tail(logs.sources["web"], b"[web] ", lines=log_lines.LineFilter())
    turn(logs, [tail])
    assert printed() == b"[web] one\n"
    guest.files[f"{DIR}/web.log"] += b"o\n"
    turn(logs, [tail])
    assert printed() == b"[web] one\n[web] two\n"
    guest.files[f"{DIR}/web.log"] = b"fresh\n"  # truncated: from its start again
    turn(logs, [tail])
    assert printed() == b"[web] one\n[web] two\n[web] fresh\n"
    assert guest.connections == 3 and guest.handles == {}  # one per round, every file closed


def test_a_service_whose_log_is_not_there_yet_prints_nothing_until_it_is(
        guest: FakeGuest, monkeypatch: pytest.MonkeyPatch) -> None:
    printed = Printed(monkeypatch)
    logs = logs_of(guest, "web")
    tail = _Tail(logs.sources["web"], b"")
    turn(logs, [tail])
    guest.files[f"{DIR}/web.log"] = b"late\n"
    turn(logs, [tail])
    assert printed() == b"late\n" and printed.err.getvalue() == ""


@pytest.mark.parametrize("kind", ["symbolic link", "fifo", "character special file",
                                  "directory", "socket"])
def test_a_log_that_is_not_a_regular_file_is_refused_and_never_opened(
        guest: FakeGuest, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    printed = Printed(monkeypatch)
    guest.kinds[f"{DIR}/web.log"] = kind
    guest.files[f"{DIR}/web.log"] = b"\x00" * 100  # what /dev/zero would give
    guest.claimed[f"{DIR}/web.log"] = 100
    logs = logs_of(guest, "web")
    tail = _Tail(logs.sources["web"], b"")
    turn(logs, [tail], final=True)
    turn(logs, [tail], final=True)  # refused once, not asked again
    assert printed() == b"" and guest.counts == []
    assert printed.err.getvalue() == f"devcell: skipping web.log in cell box is {kind}; not read\n"


def test_a_log_directory_that_is_a_link_refuses_every_log(
        guest: FakeGuest, monkeypatch: pytest.MonkeyPatch) -> None:
    printed = Printed(monkeypatch)
    guest.kinds[DIR] = "symbolic link"
    guest.files[f"{DIR}/web.log"] = b"x\n"
    logs = logs_of(guest, "web")
    turn(logs, [_Tail(logs.sources["web"], b"")], final=True)
    assert printed() == b"" and "/var/log/devcell in cell box is symbolic link" in \
        printed.err.getvalue()


def test_a_huge_log_is_read_from_its_end_one_bounded_request_at_a_time(
        guest: FakeGuest, monkeypatch: pytest.MonkeyPatch) -> None:
    printed = Printed(monkeypatch)
    guest.files[f"{DIR}/web.log"] = b"\x00" * (40 << 20) + b"the end\n"
    logs = logs_of(guest, "web")
    turn(logs, [_Tail(logs.sources["web"], b"")], final=True)
    assert printed().endswith(b"the end\n") and len(printed()) < 200
    assert max(guest.counts) <= vm_logs.READ_MAX
    assert sum(guest.counts) <= _Tail.INITIAL_MAX + vm_logs.READ_MAX
    assert "showing its last 8 MiB of 41943048 bytes" in printed.err.getvalue()


def test_a_log_claiming_endless_growth_is_read_a_bounded_amount_per_round(
        guest: FakeGuest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stat claims a terabyte more each round and every read is answered in full: each
    round asks at most PUMP_ROUNDS x PUMP_MAX, printing as it goes, and then returns."""
    printed = Printed(monkeypatch)
    piece = b"y" * 1023 + b"\n"
    path = f"{DIR}/web.log"
    guest.files[path] = piece * (vm_logs.READ_MAX // len(piece))

    def endless(name: str, timeout: float = 10.0, **args: Any) -> Any:
        if name == "guest-file-read":
            guest.counts.append(args["count"])
            data = guest.files[path][:args["count"]]
            return {"count": len(data), "buf-b64": base64.b64encode(data).decode()}
        return FakeGuest.command(guest, name, timeout, **args)
    monkeypatch.setattr(guest, "command", endless)
    logs = logs_of(guest, "web")
    tail = _Tail(logs.sources["web"], b"")
    for round_ in range(1, 4):
        guest.claimed[path] = round_ << 40
        before = sum(guest.counts)
        turn(logs, [tail])
        asked = sum(guest.counts) - before
        assert asked == (_Tail.INITIAL_MAX if round_ == 1
                         else _Tail.PUMP_ROUNDS * _Tail.PUMP_MAX)  # the bound, not the end
    assert len(printed()) > 0 and max(guest.counts) <= vm_logs.READ_MAX


@pytest.mark.parametrize(("reply", "words"), [
    ({"buf-b64": base64.b64encode(b"z" * 300).decode()}, "more than the"),
    ({"buf-b64": "!!!not base64!!!"}, "not base64"),
    ({"buf-b64": 12}, "not as text"),
    ("a string", "not an object"),
])
def test_a_lying_read_reply_is_a_backend_error(guest: FakeGuest, reply: Any, words: str) -> None:
    guest.files[f"{DIR}/web.log"] = b"short\n"
    guest.bend["guest-file-read"] = reply
    logs = logs_of(guest, "web")
    with logs.round(), pytest.raises(BackendError, match=words):
        logs.sources["web"].read(0, 100)
    assert guest.handles == {}  # closed even so


def test_a_handle_that_is_not_one_is_a_backend_error(guest: FakeGuest) -> None:
    guest.files[f"{DIR}/web.log"] = b"short\n"
    guest.bend["guest-file-open"] = {"handle": "\x1b[2J"}
    logs = logs_of(guest, "web")
    with logs.round(), pytest.raises(BackendError, match="not a handle") as raised:
        logs.sources["web"].read(0, 100)
    assert "\x1b" not in str(raised.value)


def test_stat_lines_about_other_paths_or_malformed_are_dropped() -> None:
    asked = [DIR, f"{DIR}/web.log"]
    out = (b"regular file|12|/etc/shadow\nregular file|-5|/var/log/devcell/web.log\n"
           b"regular file|99999999999999999999|/var/log/devcell/web.log\n"
           b"directory|4096|/var/log/devcell\n")
    assert vm_logs.parse_stat(out, asked) == {DIR: vm_logs.Found("directory", 4096)}
    assert vm_logs.parse_stat(b"regular empty file|0|/var/log/devcell/web.log\n", asked)[
        f"{DIR}/web.log"].regular


def test_only_the_services_named_are_read(guest: FakeGuest) -> None:
    guest.files[f"{DIR}/other.log"] = b"not asked\n"
    logs = logs_of(guest, "web")
    assert list(logs.sources) == ["web"]
    with logs.round():
        assert logs.sources["web"].size() is None


def test_a_machine_that_stopped_during_a_follow_is_said_as_such(guest: FakeGuest) -> None:
    @contextlib.contextmanager
    def gone() -> Iterator[FakeGuest]:
        raise BackendError("cell box: the guest agent closed the connection")
        yield guest
    stopped = vm_logs.GuestLogs("box", ["web"], agent=gone, run=guest.run,
                                running=lambda: False)
    with pytest.raises(BackendError, match="cell box is no longer running"), stopped.round():
        pass
    alive = vm_logs.GuestLogs("box", ["web"], agent=gone, run=guest.run, running=lambda: True)
    with pytest.raises(BackendError, match="closed the connection"), alive.round():
        pass
    # A QEMU quitting (a sleep) resets its sockets a moment before its process is gone.
    answers = iter([True, True, False])
    quitting = vm_logs.GuestLogs("box", ["web"], agent=gone, run=guest.run,
                                 running=lambda: next(answers))
    with pytest.raises(BackendError, match="cell box is no longer running"), quitting.round():
        pass
