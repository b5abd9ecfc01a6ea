"""A hostile guest agent: root in a vm cell can put its own program on the agent's port.

Everything the host reads from that port is the guest's word: a reply that never comes,
never ends, is nested ten thousand levels deep, answers another request, carries escape
sequences, or claims an exit status of 10**30 and base64 that is not. The host's client
(devcell.backends.vm.drivers.qmp.Agent and the exec reply checks in vm_exec) must stay bounded in
time and memory and fail with a BackendError, never a traceback or a forged output line.

This tests DevCell's parser, not QEMU: the agent here is a program speaking qemu-ga's protocol
(sync after a 0xFF byte, replies echoing the request's id, as the real qemu-ga does), with its
replies bent one way at a time, on either transport a machine's agent port can have: a pair
of FIFOs held open as QEMU's `-chardev pipe` holds them, or a unix socket (machines started
before the FIFOs). The attack through a real guest is in tests/backends/vm/test_hostile_guest.py.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from devcell.backends.vm import guest_exec as vm_exec
from devcell.backends.vm.backend import VmBackend
from devcell.backends.vm.drivers import qmp as vm_qmp
from devcell.errors import BackendError, BackendUnavailable


class Conn(Protocol):
    """The fake agent's end of the port: a socket, or the FIFOs' holder (PipeEnd)."""

    def sendall(self, data: bytes, /) -> None: ...
    def shutdown(self, how: int, /) -> None: ...


Answer = Callable[[dict[str, Any], Conn], None]
"""What the fake agent does with a request that is not a sync (send something, or not)."""


def reply(conn: Conn, request: dict[str, Any], value: Any) -> None:
    conn.sendall(json.dumps({"return": value, "id": request.get("id")}).encode() + b"\n")


class PipeEnd:
    """What QEMU does with `-chardev pipe,path=ga`: both FIFOs open read-write for its life
    (so its clients never see an end of file while it runs); requests read from ga.in,
    replies written to ga.out. `shutdown` is QEMU quitting: both closed."""

    def __init__(self, directory: Path) -> None:
        vm_qmp.make_agent_pipes(directory)
        self.requests = os.open(directory / "ga.in", os.O_RDWR)
        self.replies = os.open(directory / "ga.out", os.O_RDWR)
        self.closed = False

    def sendall(self, data: bytes, /) -> None:
        view = memoryview(data)
        while view:
            if self.closed:  # a flooding thread outlives its test: it must stop writing
                raise OSError(errno.EBADF, "the agent's FIFOs are closed")
            view = view[os.write(self.replies, view[:1 << 16]):]

    def shutdown(self, how: int = socket.SHUT_RDWR, /) -> None:
        """Both FIFO ends closed, their descriptor numbers kept on /dev/null: a thread still
        writing would otherwise write into whatever file a later test opens under the same
        number (a flood of "A" once landed in another test's `du` output)."""
        self.closed = True
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (self.requests, self.replies):
            with contextlib.suppress(OSError):
                os.dup2(null, fd)
        os.close(null)


def _talk(lines: Iterator[bytes], conn: Conn, answer: Answer) -> None:
    for raw in lines:
        # qemu-ga's parser starts again at a 0xFF byte, refusing what came before it
        cut, reset, text = raw.rpartition(b"\xff")
        if reset and cut.strip():
            conn.sendall(b'{"error": {"class": "GenericError", "desc": "JSON parse error"}}\n')
        request = json.loads(text)
        if request["execute"] == "guest-sync-delimited":
            conn.sendall(b"\xff" + json.dumps(
                {"return": request["arguments"]["id"]}).encode() + b"\n")
        else:
            answer(request, conn)


@pytest.fixture(params=["pipes", "socket"])
def agent_dir(tmp_path: Path, request: pytest.FixtureRequest
              ) -> Iterator[Callable[[Answer], Path]]:
    """A directory whose agent port is a fake agent: honest syncs, then `answer` per
    request; on FIFOs, or on a socket."""
    closers: list[Callable[[], None]] = []

    def serve_pipes(answer: Answer) -> Path:
        end = PipeEnd(tmp_path)
        closers.append(lambda: end.shutdown(socket.SHUT_RDWR))
        lines = os.fdopen(os.dup(end.requests), "rb")
        threading.Thread(target=_quietly, args=(lambda _: _talk(iter(lines), end, answer),
                                                 None), daemon=True).start()
        return tmp_path

    def serve_socket(answer: Answer) -> Path:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(tmp_path / "ga.sock"))
        listener.listen(4)
        closers.append(listener.close)

        def talk(conn: Conn) -> None:
            with conn, conn.makefile("rb") as lines:
                _talk(iter(lines), conn, answer)

        def accept() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                threading.Thread(target=_quietly, args=(talk, conn), daemon=True).start()
        threading.Thread(target=accept, daemon=True).start()
        return tmp_path
    yield serve_pipes if request.param == "pipes" else serve_socket
    for close in closers:
        close()


def _quietly(talk: Callable[[Any], None], conn: Any) -> None:
    try:
        talk(conn)
    except (OSError, ValueError):
        pass  # the client gave up on this agent mid-request, as it should


def test_a_reply_that_never_comes_is_a_timeout_error_not_a_hang(
        agent_dir: Callable[[Answer], Path]) -> None:
    directory = agent_dir(lambda request, conn: None)
    began = time.monotonic()
    with vm_qmp.Agent(directory, timeout=5.0) as agent, \
            pytest.raises(BackendUnavailable, match="did not answer in time"):
        agent.command("guest-ping", timeout=1.0)
    assert time.monotonic() - began < 30  # bounded by the timeouts given, not forever


def test_a_never_ending_line_is_refused_with_bounded_memory(
        agent_dir: Callable[[Answer], Path]) -> None:
    chunk = b"A" * (1 << 16)

    def flood(request: dict[str, Any], conn: Conn) -> None:
        while True:
            conn.sendall(chunk)
    directory = agent_dir(flood)
    tracemalloc.start()
    try:
        with vm_qmp.Agent(directory, timeout=5.0) as agent, \
                pytest.raises(BackendError, match="longer than"):
            agent.command("guest-ping", timeout=120.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * vm_qmp.MAX_LINE, peak


def test_a_reply_nested_too_deep_is_refused_not_a_recursion_error(
        agent_dir: Callable[[Answer], Path]) -> None:
    directory = agent_dir(lambda request, conn: conn.sendall(b"[" * 200_000 + b"\n"))
    with vm_qmp.Agent(directory, timeout=5.0) as agent, \
            pytest.raises(BackendError, match="more than 4096 JSON objects"):
        agent.command("guest-ping")


def test_replies_to_other_requests_are_skipped(agent_dir: Callable[[Answer], Path]) -> None:
    def confuse(request: dict[str, Any], conn: Conn) -> None:
        for stale in ({"return": "stale"}, {"return": "wrong", "id": "devcell-999"},
                      {"return": "wrong", "id": 1}):
            conn.sendall(json.dumps(stale).encode() + b"\n")
        reply(conn, request, "mine")
    directory = agent_dir(confuse)
    with vm_qmp.Agent(directory, timeout=5.0) as agent:
        assert agent.command("guest-ping") == "mine"
        assert agent.command("guest-ping") == "mine"


def test_only_replies_to_other_requests_end_in_a_timeout(
        agent_dir: Callable[[Answer], Path]) -> None:
    directory = agent_dir(lambda request, conn: conn.sendall(b'{"return": 1, "id": "x"}\n'))
    with vm_qmp.Agent(directory, timeout=5.0) as agent, \
            pytest.raises(BackendUnavailable, match="did not answer in time"):
        agent.command("guest-ping", timeout=1.0)


@pytest.mark.parametrize("error", ["a string", 5, None, ["a", "list"],
                                   {"desc": "\x1b[31mred\ncell/api created"},
                                   {"desc": "x" * 100_000}])
def test_an_error_of_any_shape_is_a_backend_error_escaped_and_cut(
        agent_dir: Callable[[Answer], Path], error: Any) -> None:
    def refuse(request: dict[str, Any], conn: Conn) -> None:
        conn.sendall(json.dumps({"error": error, "id": request["id"]}).encode() + b"\n")
    directory = agent_dir(refuse)
    with vm_qmp.Agent(directory, timeout=5.0) as agent, \
            pytest.raises(BackendError, match="refused guest-ping") as caught:
        agent.command("guest-ping")
    message = str(caught.value)
    assert message.isprintable(), message
    assert len(message) < 2 * vm_qmp.MAX_WORDS


def test_an_agent_that_hangs_up_mid_reply_is_unavailable(
        agent_dir: Callable[[Answer], Path]) -> None:
    def hang_up(request: dict[str, Any], conn: Conn) -> None:
        conn.sendall(b'{"return": {"pi')
        conn.shutdown(socket.SHUT_RDWR)
    directory = agent_dir(hang_up)
    with vm_qmp.Agent(directory, timeout=5.0) as agent, \
            pytest.raises(BackendUnavailable, match="closed the connection"):
        agent.command("guest-ping")


def _listening(directory: Path) -> socket.socket:
    """A bare ga.sock in `directory`: what answers (if anything) is the test's to decide."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(directory / "ga.sock"))
    listener.listen(1)
    return listener


def _agent_gives_up_within(directory: Path, *, timeout: float, within: float) -> None:
    began = time.monotonic()
    with pytest.raises(BackendUnavailable, match="did not answer"):
        vm_qmp.Agent(directory, timeout=timeout)
    assert time.monotonic() - began < within


def test_an_agent_that_reads_nothing_fails_the_send_in_time(tmp_path: Path) -> None:
    """It accepts, then never reads: the sync cannot even be sent in full."""
    with contextlib.closing(_listening(tmp_path)):
        _agent_gives_up_within(tmp_path, timeout=2.0, within=30)


def test_an_agent_that_answers_only_the_first_sync_costs_the_callers_time(
        tmp_path: Path) -> None:
    """The second sync round (the one that puts stale replies behind) keeps to the caller's
    deadline: a sleep holding a connection for 1 s is not held up for 11 by a guest that
    answers once and then falls silent."""
    listener = _listening(tmp_path)

    def once() -> None:
        conn, _ = listener.accept()
        with conn, conn.makefile("rb") as lines:
            request = json.loads(next(lines).lstrip(b"\xff"))
            conn.sendall(b"\xff" + json.dumps({"return": request["arguments"]["id"]}).encode()
                         + b"\n")
            for _ in lines:  # everything after: never answered
                pass

    threading.Thread(target=_quietly, args=(lambda _: once(), None), daemon=True).start()
    with contextlib.closing(listener):
        _agent_gives_up_within(tmp_path, timeout=1.0, within=3)


def test_a_machine_that_stopped_is_not_waited_for(tmp_path: Path) -> None:
    """No socket (QEMU gone: slept, stopped, deleted) and the machine is seen not running: the
    connect gives up at once, not after the boot timeout (a `logs -f` of a cell that went to
    sleep hung for minutes in CI); while it still runs, the timeout is waited out."""
    checks: list[float] = []

    def stopped() -> bool:
        checks.append(time.monotonic())
        return False

    began = time.monotonic()
    with pytest.raises(BackendUnavailable, match="machine is not running"):
        vm_qmp.Agent(tmp_path, timeout=120.0, alive=stopped)
    assert time.monotonic() - began < 5 and len(checks) == 1
    began = time.monotonic()
    with pytest.raises(BackendUnavailable, match="cannot reach the guest agent"):
        vm_qmp.Agent(tmp_path, timeout=0.5, alive=lambda: True)
    assert time.monotonic() - began >= 0.5


def test_fifos_nobody_holds_are_a_machine_not_running(tmp_path: Path) -> None:
    """The FIFOs are there but no QEMU holds them (it quit, or was killed): opening the
    request FIFO fails at once (ENXIO), never blocks, and is retried like a refused socket."""
    vm_qmp.make_agent_pipes(tmp_path)
    began = time.monotonic()
    with pytest.raises(BackendUnavailable, match="machine is not running"):
        vm_qmp.Agent(tmp_path, timeout=120.0, alive=lambda: False)
    assert time.monotonic() - began < 5
    with pytest.raises(BackendUnavailable, match="cannot reach the guest agent"):
        vm_qmp.Agent(tmp_path, timeout=0.5, alive=lambda: True)


def _pipe_agent(directory: Path, answer: Answer) -> PipeEnd:
    end = PipeEnd(directory)
    lines = os.fdopen(os.dup(end.requests), "rb")
    threading.Thread(target=_quietly, args=(lambda _: _talk(iter(lines), end, answer), None),
                     daemon=True).start()
    return end


def test_clients_of_the_fifos_take_turns_one_exchange_at_a_time(tmp_path: Path) -> None:
    """Two clients writing into one FIFO would interleave their requests: they take turns
    (an flock on ga.lock) one request and reply at a time, so a long exec polling its
    command keeps no other command waiting; each reply reaches the client that asked."""
    end = _pipe_agent(tmp_path, lambda request, conn: reply(conn, request, request["id"]))
    try:
        with vm_qmp.Agent(tmp_path, timeout=5.0) as first, \
                vm_qmp.Agent(tmp_path, timeout=5.0) as second:
            for _ in range(3):
                mine, theirs = first.command("guest-ping"), second.command("guest-ping")
                assert mine.startswith(f"devcell-{first.session}-")
                assert theirs.startswith(f"devcell-{second.session}-")
    finally:
        end.shutdown(socket.SHUT_RDWR)


def test_others_turns_are_not_taken_from_a_requests_own_time(tmp_path: Path) -> None:
    """A 16 MiB request of another client can hold the port for seconds: waiting for it
    (up to TURN_SECONDS) is not this request's timeout, which starts with its turn."""
    end = _pipe_agent(tmp_path, lambda request, conn: reply(conn, request, "pong"))
    holder = os.open(tmp_path / "ga.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with vm_qmp.Agent(tmp_path, timeout=5.0) as agent:
            fcntl.flock(holder, fcntl.LOCK_EX)
            threading.Timer(1.0, lambda: fcntl.flock(holder, fcntl.LOCK_UN)).start()
            began = time.monotonic()
            assert agent.command("guest-ping", timeout=0.5) == "pong"
            assert time.monotonic() - began >= 0.9
    finally:
        os.close(holder)
        end.shutdown(socket.SHUT_RDWR)


def test_a_request_refused_while_the_guest_is_frozen_is_asked_again(tmp_path: Path) -> None:
    """A checkpoint freezes the guest between two of an exec's polls; qemu-ga refuses most
    calls until the thaw. The call is asked again until its deadline, then refused."""
    frozen = {"left": 3}

    def answer(request: dict[str, Any], conn: Conn) -> None:
        if request["execute"] == "guest-exec-status" and frozen["left"]:
            frozen["left"] -= 1
            conn.sendall(json.dumps({"id": request["id"], "error": {
                "class": "GenericError", "desc": "Command guest-exec-status has been "
                "disabled: the agent is in frozen state"}}).encode() + b"\n")
            return
        reply(conn, request, {"exited": False})
    end = _pipe_agent(tmp_path, answer)
    try:
        with vm_qmp.Agent(tmp_path, timeout=5.0) as agent:
            assert agent.command("guest-exec-status", pid=1) == {"exited": False}
            frozen["left"] = 10**6
            began = time.monotonic()
            with pytest.raises(BackendError, match="frozen state"):
                agent.command("guest-exec-status", timeout=0.5, pid=1)
            assert time.monotonic() - began < 5
    finally:
        end.shutdown(socket.SHUT_RDWR)


def test_a_turn_never_let_go_is_waited_for_only_until_the_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vm_qmp, "TURN_SECONDS", 0.5)
    end = _pipe_agent(tmp_path, lambda request, conn: reply(conn, request, "pong"))
    holder = os.open(tmp_path / "ga.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another process, stuck in its turn
        began = time.monotonic()
        with pytest.raises(BackendUnavailable, match="another process holds this machine's "
                           "guest agent"):
            vm_qmp.Agent(tmp_path, timeout=0.5)
        assert time.monotonic() - began < 5
        os.close(holder)  # the kernel ends the turn of a process that dies
        holder = -1
        with vm_qmp.Agent(tmp_path, timeout=5.0) as agent:
            assert agent.command("guest-ping") == "pong"
    finally:
        if holder >= 0:
            os.close(holder)
        end.shutdown(socket.SHUT_RDWR)


def test_an_exchange_given_up_makes_the_next_one_sync_first(tmp_path: Path) -> None:
    """A client that gave up on a reply (or died mid-request) leaves its turn marked as not
    ended whole; the next exchange, any client's, syncs past what it left before asking."""
    slow = threading.Event()

    def answer(request: dict[str, Any], conn: Conn) -> None:
        if request["execute"] == "guest-slow":
            slow.wait(5)  # answered late, after its client gave up
        reply(conn, request, request["execute"])
    end = _pipe_agent(tmp_path, answer)
    try:
        with vm_qmp.Agent(tmp_path, timeout=5.0) as first, \
                vm_qmp.Agent(tmp_path, timeout=5.0) as second:
            with pytest.raises(BackendUnavailable, match="did not answer in time"):
                first.command("guest-slow", timeout=0.3)
            assert (tmp_path / "ga.lock").read_bytes() == b"1"
            slow.set()
            os.write(os.open(tmp_path / "ga.in", os.O_WRONLY | os.O_NONBLOCK),
                     b'{"execute": "guest-half')  # and a request cut in the middle
            assert second.command("guest-ping") == "guest-ping"
            assert first.command("guest-ping") == "guest-ping"
            assert (tmp_path / "ga.lock").read_bytes() == b"0"
    finally:
        end.shutdown(socket.SHUT_RDWR)


def test_what_an_earlier_client_left_in_the_fifo_is_skipped(tmp_path: Path) -> None:
    """A client killed mid-request leaves its replies in ga.out (QEMU holds it open, so they
    stay): the next client's sync reads past them, whatever they claim to answer."""
    end = _pipe_agent(tmp_path, lambda request, conn: reply(conn, request, "mine"))
    try:
        end.sendall(b'{"return": "stale", "id": "devcell-1"}\n\xff{"return": 12345}\n'
                    b'{"return": {"pi')
        with vm_qmp.Agent(tmp_path, timeout=5.0) as agent:
            assert agent.command("guest-ping") == "mine"
    finally:
        end.shutdown(socket.SHUT_RDWR)


def test_an_agent_port_that_is_not_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    """A link where a FIFO belongs is not followed (O_NOFOLLOW), a regular file there is not
    taken for one (fstat), and neither is waited for (no wait makes it a FIFO): nothing is
    read or written through either, and the command fails at once, not after its timeout."""
    outside = tmp_path / "outside"
    outside.mkdir()
    os.mkfifo(outside / "fifo")
    machine = tmp_path / "machine"
    machine.mkdir()
    vm_qmp.make_agent_pipes(machine)
    (machine / "ga.out").unlink()
    (machine / "ga.out").symlink_to(outside / "fifo")
    held = os.open(machine / "ga.in", os.O_RDWR)  # a reader: only the link stands in the way
    try:
        began = time.monotonic()
        with pytest.raises(BackendError, match="cannot reach the guest agent") as caught:
            vm_qmp.Agent(machine, timeout=60.0)
        assert not isinstance(caught.value, BackendUnavailable)  # for good: never retried
        assert time.monotonic() - began < 5
    finally:
        os.close(held)
    for name in ("ga.in", "ga.out"):
        (machine / name).unlink()
        (machine / name).write_bytes(b'\xff{"return": 1}\n')
    began = time.monotonic()
    with pytest.raises(BackendError, match="not a FIFO"):
        vm_qmp.Agent(machine, timeout=60.0)
    assert time.monotonic() - began < 5
    assert (machine / "ga.in").read_bytes() == (machine / "ga.out").read_bytes() \
        == b'\xff{"return": 1}\n'
    vm_qmp.make_agent_pipes(machine)  # and a lock that is no regular file: named, at once
    (machine / "ga.lock").unlink()  # the earlier attempts made it
    os.mkfifo(machine / "ga.lock")
    with pytest.raises(BackendError, match=r"not a regular file \(ga.lock\)"):
        vm_qmp.Agent(machine, timeout=60.0)
    (machine / "ga.lock").unlink()
    (machine / "ga.lock").mkdir()
    with pytest.raises(BackendError, match=r"\(ga.lock\)"):
        vm_qmp.Agent(machine, timeout=60.0)
    assert time.monotonic() - began < 10


def test_a_wait_for_a_turn_ends_when_the_machine_stops(tmp_path: Path) -> None:
    end = _pipe_agent(tmp_path, lambda request, conn: reply(conn, request, "pong"))
    holder = os.open(tmp_path / "ga.lock", os.O_RDWR | os.O_CREAT, 0o600)
    running = [True]
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        threading.Timer(0.5, lambda: running.__setitem__(0, False)).start()
        began = time.monotonic()
        with pytest.raises(BackendUnavailable, match="machine is not running"):
            vm_qmp.Agent(tmp_path, timeout=60.0, alive=lambda: running[0])
        assert time.monotonic() - began < 5
    finally:
        os.close(holder)
        end.shutdown(socket.SHUT_RDWR)


def test_a_request_the_agent_never_reads_is_a_timeout(
        agent_dir: Callable[[Answer], Path]) -> None:
    """guest-exec with 16 MiB of input to an agent that stopped reading after the sync."""
    stuck = threading.Event()

    def stop_reading(request: dict[str, Any], conn: Conn) -> None:
        stuck.wait()
    directory = agent_dir(stop_reading)
    try:
        with vm_qmp.Agent(directory, timeout=5.0) as agent:
            agent.command  # noqa: B018 - connected and synced
            with pytest.raises(BackendUnavailable, match="did not answer in time"):
                agent.command("guest-ping", timeout=1.0)
            # on a socket the send stalls; on the FIFOs the next exchange syncs first, and
            # that sync is never answered: either way a BackendError within the time given
            with pytest.raises(BackendUnavailable,
                               match="did not read a request in time|did not answer"):
                agent.command("guest-exec", timeout=1.0, path="/bin/true",
                              **{"input-data": "A" * (16 << 20)})
    finally:
        stuck.set()


# -- guest-exec's replies, through the backend's own exec loop --------------------------------

def _exec_agent(started: Any, status: Any) -> Answer:
    def answer(request: dict[str, Any], conn: Conn) -> None:
        reply(conn, request, started if request["execute"] == "guest-exec" else status)
    return answer


def _run(directory: Path) -> tuple[int, bytes, bytes]:
    with vm_qmp.Agent(directory, timeout=5.0) as agent:
        return VmBackend._run(agent, ["/bin/true"], timeout=5.0)


@pytest.mark.parametrize(("started", "status", "match"), [
    ([], {}, "no process id"),
    ({"pid": "1; rm -rf /"}, {}, "no process id"),
    ({"pid": True}, {}, "no process id"),
    ({"pid": 7}, "exited", "not an object"),
    ({"pid": 7}, {"exited": True, "exitcode": 10**30}, "impossible end"),
    ({"pid": 7}, {"exited": True, "exitcode": -1}, "impossible end"),
    ({"pid": 7}, {"exited": True, "exitcode": "0"}, "impossible end"),
    ({"pid": 7}, {"exited": True, "signal": "KILL"}, "impossible end"),
    ({"pid": 7}, {"exited": True}, "impossible end"),
    ({"pid": 7}, {"exited": True, "exitcode": 0, "out-data": "not base64!"}, "not base64"),
    ({"pid": 7}, {"exited": True, "exitcode": 0, "err-data": ["x"]}, "not text"),
])
def test_an_impossible_exec_reply_is_a_backend_error(
        agent_dir: Callable[[Answer], Path], started: Any, status: Any, match: str) -> None:
    with pytest.raises(BackendError, match=match):
        _run(agent_dir(_exec_agent(started, status)))


def test_an_honest_exec_reply_is_believed(agent_dir: Callable[[Answer], Path]) -> None:
    status = {"exited": True, "signal": 9, "out-data": "aGk=", "err-data": ""}
    assert _run(agent_dir(_exec_agent({"pid": 7}, status))) == (137, b"hi", b"")


def test_output_past_the_limit_is_cut_before_it_is_decoded() -> None:
    """Base64 the size of a whole reply line decodes to at most 16 MiB."""
    huge = "QUFB" * (vm_qmp.MAX_LINE // 8)  # 32 MiB of base64: 24 MiB claimed output
    tracemalloc.start()
    try:
        done = vm_exec.finished({"exited": True, "exitcode": 0, "out-data": huge})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert done is not None and len(done.out) == vm_exec.OUTPUT_LIMIT
    assert peak < 3 * vm_exec.OUTPUT_LIMIT, peak


def test_a_reply_of_millions_of_objects_is_refused_unparsed_in_bounded_memory(
        agent_dir: Callable[[Answer], Path]) -> None:
    """30 MB of `[{},{},...]`, under the line limit: parsed whole it was ten million objects
    and an exec of a 128 MiB cell grew the host's process to 1.5 GB."""
    flood = b'{"return": [' + b"{}," * 10_000_000 + b'{}], "id": null}\n'

    directory = agent_dir(lambda request, conn: conn.sendall(flood))  # refused before its id
    tracemalloc.start()
    try:
        with pytest.raises(BackendError, match="more than 4096 JSON objects"):
            _run(directory)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"peak {peak / 2**20:.1f} MiB for a {len(flood) / 2**20:.1f} MiB reply")
    assert peak < 3 * len(flood), peak  # the line and its buffer, never the objects
