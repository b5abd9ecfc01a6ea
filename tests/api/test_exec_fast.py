"""`devcell exec` on a running container cell takes the fast path (api/exec_fast.py) and does
what the full path did: output, exit status, stdin, environment, the same errors, the drift
warning and its record; a hostile cell's flood costs it bounded memory.

Real engine. One cell for the module (~3 s to apply on a quiet host); the drift tests make
their own (~3 s each), since they stop or pause its container.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.container import observe as container_observe
from tests.backends.engine import IMAGE, remove_containers, require_engine
from tests.conftest import REPO, db_fingerprint

CANARY = "canary-exec-fast-41c7"


def _manifest(directory: Path, name: str = "box") -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: {name}}}
        spec:
          backend: container
          image: {IMAGE}
          network: {{mode: none}}
          env:
            - {{name: GREETING, value: hello}}
            - {{name: TOKEN, value: {CANARY}, secret: true}}
          services:
            - name: idle
              command: [sleep, "600"]
        """))
    return path


def _env(state: Path) -> dict[str, str]:
    env = dict(os.environ, DEVCELL_HOME=str(state))
    env.pop("DEVCELL_FAKE_FAIL", None)
    return env


def devcell(state: Path, *args: str, input: bytes | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "devcell", *args], input=input,
                          capture_output=True, env=_env(state), cwd=REPO, timeout=timeout)


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A state directory holding one running container cell, `box`."""
    require_engine()
    root = tmp_path_factory.mktemp("exec-fast")
    path = root / "state"
    try:
        applied = devcell(path, "apply", "-f", str(_manifest(root)), timeout=300)
        assert applied.returncode == 0, applied.stderr
        yield path
    finally:
        remove_containers(path)


_LISTING = """
import atexit, sys
atexit.register(lambda: sys.__stdout__.write("\\nMODULES " + " ".join(sorted(sys.modules))))
sys.argv[0] = "devcell"
from devcell.cli.main import main
sys.exit(main())
"""
"""`devcell ARGS` as the console script runs it, listing every module it imported at exit."""

FAST_PATH_MODULES = [
    "devcell", "devcell.api", "devcell.api.exec_fast", "devcell.backends",
    "devcell.backends.container", "devcell.backends.container.engine",
    "devcell.backends.container.engine_http", "devcell.backends.container.engine_json",
    "devcell.backends.container.exec_socket",
    "devcell.backends.container.labels", "devcell.cli", "devcell.cli.exec_fast",
    "devcell.cli.main", "devcell.store", "devcell.store.activity_sessions",
    "devcell.store.cell_glance", "devcell.store.state_dir",
]
"""What `devcell exec CELL -- true` imports of DevCell on the fast path: a change here is a
deliberate one (each module costs start-up; bench/exec.py)."""

FAST_PATH_STDLIB = [
    "__future__", "_json", "_sha256", "_socket", "_sqlite3", "errno", "gc",
    # _sqlite3 loads functools (its statement cache is an lru_cache), which loads these:
    "_collections", "_functools", "_operator", "collections", "functools", "itertools",
    "keyword", "operator", "reprlib", "types",
]
"""What else it imports, beyond what the interpreter has before its first line, on Python 3.11
(another version's C modules differ: the denied list below is checked on every one)."""
NOT_ON_THE_FAST_PATH = {
    "docker", "requests", "urllib3", "loguru", "sqlite_utils", "yaml", "sqlite3",
    # each costs more than the engine's round trips (issue 26): the C modules under them, or
    # nothing, instead
    "typing", "re", "enum", "json", "pathlib", "urllib", "ipaddress", "fnmatch", "signal",
    "socket", "contextlib", "dataclasses", "datetime", "http", "email",
}


def test_exec_takes_the_fast_path_and_writes_nothing(state: Path) -> None:
    before = db_fingerprint(state)
    observed = (state / "observed.json").read_bytes()
    ran = subprocess.run([sys.executable, "-c", _LISTING, "exec", "box", "--", "true"],
                         capture_output=True, text=True, env=_env(state), cwd=REPO, timeout=120)
    assert ran.returncode == 0, ran.stderr
    imported = ran.stdout.rpartition("MODULES ")[2].split()
    assert [m for m in imported if m.split(".")[0] == "devcell"] == FAST_PATH_MODULES
    assert not {m.split(".")[0] for m in imported} & NOT_ON_THE_FAST_PATH
    bare = subprocess.run([sys.executable, "-c", "import atexit, sys; print(*sys.modules)"],
                          capture_output=True, text=True, env=_env(state), cwd=REPO,
                          timeout=120, check=True).stdout.split()
    if sys.version_info[:2] == (3, 11):
        assert sorted(set(imported) - set(bare) - set(FAST_PATH_MODULES)) == sorted(FAST_PATH_STDLIB)
    assert db_fingerprint(state) == before
    assert (state / "observed.json").read_bytes() == observed
    from devcell.store import activity

    assert activity.seen(state, _cell_id(state)).last.what == "exec session closed"  # type: ignore[union-attr]


def _cell_id(state: Path) -> str:
    shown = devcell(state, "get", "cell", "box", "-o", "json")
    return str(json.loads(shown.stdout)["metadata"]["id"])


@pytest.mark.parametrize("code", [0, 1, 42, 255])
def test_the_exit_status_and_both_streams_are_passed_through(state: Path, code: int) -> None:
    ran = devcell(state, "exec", "box", "--", "sh", "-c",
                  f"echo out; echo err >&2; echo out2; echo err2 >&2; exit {code}")
    assert ran.returncode == code
    assert ran.stdout == b"out\nout2\n"
    assert ran.stderr == b"err\nerr2\n"


def test_a_command_killed_by_a_signal_exits_as_the_full_path_said(state: Path) -> None:
    ran = devcell(state, "exec", "box", "--", "sh", "-c", "kill -9 $$")
    assert ran.returncode == 137, ran.stderr


def test_stdin_with_i_reaches_the_command_and_its_end_closes_it(state: Path) -> None:
    data = os.urandom(3 << 20)
    ran = devcell(state, "exec", "-i", "box", "--", "sha256sum", input=data)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
    without = devcell(state, "exec", "box", "--", "cat", input=b"not forwarded\n")
    assert without.returncode == 0 and without.stdout == b""


def test_large_output_arrives_whole_on_its_own_stream(state: Path) -> None:
    ran = devcell(state, "exec", "box", "--", "sh", "-c",
                  "head -c 25000000 /dev/zero | tr '\\0' x; head -c 3000000 /dev/zero >&2")
    assert ran.returncode == 0
    assert len(ran.stdout) == 25_000_000 and set(ran.stdout) == {ord("x")}
    assert ran.stderr == b"\0" * 3_000_000


def test_env_workdir_and_the_cells_environment_secrets_included(state: Path) -> None:
    ran = devcell(state, "exec", "-e", "EXTRA=a b", "--env=EMPTY=", "-w", "/tmp", "box", "--",
                  "sh", "-c", 'echo "$EXTRA|$EMPTY|$GREETING|$(pwd)"; '
                  f'test "$TOKEN" = {CANARY} && echo secret-ok')
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == b"a b||hello|/tmp\nsecret-ok\n"
    assert CANARY.encode() not in ran.stderr


def test_a_missing_cell_is_the_full_paths_error(state: Path) -> None:
    ran = devcell(state, "exec", "bx", "--", "true")
    assert ran.returncode == 1
    assert ran.stderr.decode() == 'error: cell "bx" not found; did you mean "box"?\n'


def test_exec_from_a_removed_current_directory_runs(state: Path, tmp_path: Path) -> None:
    """Run in a directory removed meanwhile (a build tree), the fast path was a traceback
    (os.getcwd() while placing the absolute state directory) where every other command ran
    (found by attack41)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    ran = subprocess.run(
        ["sh", "-c", 'cd "$1" && rmdir "$1" && exec "$0" -m devcell exec box -- echo hi',
         sys.executable, str(gone)],
        capture_output=True, env=dict(_env(state), PYTHONPATH=str(REPO)), timeout=120)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, b"hi\n", b"")


def test_nothing_applied_there_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    empty = tmp_path / "nothing"
    ran = devcell(empty, "exec", "box", "--", "true")
    assert ran.returncode == 1 and b"nothing has been applied there yet" in ran.stderr
    assert not empty.exists()


def test_a_hostile_flood_is_relayed_in_bounded_memory(state: Path) -> None:
    """1 GiB of output as fast as the cell can write it: relayed to a slow-ish reader, the
    exec process's peak memory stays what a small command's is (not the output's size)."""
    script = ("import resource, subprocess, sys\n"
              "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)\n"
              "total = 0\n"
              "while chunk := p.stdout.read(1 << 16):\n"
              "    total += len(chunk)\n"
              "code = p.wait()\n"
              "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
              "print(total, code, peak)\n")
    ran = subprocess.run([sys.executable, "-c", script, sys.executable, "-m", "devcell", "exec",
                          "box", "--", "head", "-c", str(1 << 30), "/dev/zero"],
                         capture_output=True, text=True, env=_env(state), cwd=REPO,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr
    total, code, peak_kib = (int(x) for x in ran.stdout.split())
    assert (total, code) == (1 << 30, 0)
    assert peak_kib < 80 * 1024, f"the exec process peaked at {peak_kib} KiB"


def _fresh_cell(tmp_path: Path, name: str) -> Path:
    require_engine()
    state = tmp_path / "state"
    applied = devcell(state, "apply", "-f", str(_manifest(tmp_path, name)), timeout=300)
    assert applied.returncode == 0, applied.stderr
    return state


def _status(state: Path, name: str) -> dict[str, object]:
    shown = devcell(state, "get", "cell", name, "-o", "json")
    status: dict[str, object] = json.loads(shown.stdout)["status"]
    return status


def test_a_paused_container_is_drift_said_and_recorded(tmp_path: Path) -> None:
    """The fast path's one look sees the container paused behind DevCell's back: the full
    path then warns, records the drift (Pending, RuntimeDrifted) and the engine refuses."""
    state = _fresh_cell(tmp_path, "paws")
    try:
        [found] = container_observe.list_containers(state)
        assert container_observe.pause(found["Id"], "test")
        ran = devcell(state, "exec", "paws", "--", "true")
        assert ran.returncode == 1
        assert b"warning: cell paws: its runtime is paused (frozen)" in ran.stderr
        assert b"Traceback" not in ran.stderr
        status = _status(state, "paws")
        assert status["phase"] == "Pending"
        ready = [c for c in status["conditions"] if c["type"] == "Ready"]  # type: ignore[attr-defined]
        assert ready[0]["reason"] == "RuntimeDrifted"
        container_observe.unpause(found["Id"], "test")
        started = devcell(state, "cell", "start", "paws", timeout=300)
        assert started.returncode == 0, started.stderr
        again = devcell(state, "exec", "paws", "--", "echo", "back")
        assert (again.returncode, again.stdout, again.stderr) == (0, b"back\n", b"")
    finally:
        remove_containers(state)


def test_a_removed_container_is_drift_and_a_stopped_cell_the_same_error(tmp_path: Path) -> None:
    state = _fresh_cell(tmp_path, "gone")
    try:
        [found] = container_observe.list_containers(state)
        assert container_observe.remove(found["Id"], "test")
        ran = devcell(state, "exec", "gone", "--", "true")
        assert ran.returncode == 1
        assert ran.stderr.decode().splitlines() == [
            "warning: cell gone: its runtime is gone (recorded Running); `devcell cell start "
            "gone` repairs it; running the command anyway",
            "error: cell gone is not running (container absent); start it with `devcell cell "
            "start gone`"]
    finally:
        remove_containers(state)


def test_a_reader_that_goes_away_ends_exec_quietly(state: Path) -> None:
    """`devcell exec CELL -- yes | head -n 1`: stdout closes under the relay; exit 0, no
    traceback, as the full path did (the command in the cell is hung up on)."""
    ran = subprocess.run(f"{sys.executable} -m devcell exec box -- yes | head -n 1; "
                         "echo \"status ${PIPESTATUS[0]}\" >&2", shell=True,
                         executable="/bin/bash", capture_output=True, env=_env(state),
                         cwd=REPO, timeout=120)
    assert ran.stdout == b"y\n"
    assert ran.stderr.decode().strip().splitlines() == ["status 0"]


def _proxy_dropping_the_starts_answer(path: str, engine: str) -> None:
    """A unix-socket proxy to the engine that passes every request through, except that it
    hangs up on the first exec start once the command said it started."""
    import socket
    import threading

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    dropped = threading.Event()

    def pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def handle(conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head and (data := conn.recv(65536)):
            head += data
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(engine)
        upstream.sendall(head)
        if b"/start HTTP" in head.partition(b"\r\n")[0] and not dropped.is_set():
            dropped.set()
            # the engine answers 101 before it starts the command, and a hang-up before the
            # start cancels it: wait for the command's own output, then hang up on the client
            upstream.settimeout(60)
            seen = b""
            while b"started" not in seen and (data := upstream.recv(65536)):
                seen += data
            conn.close()
            upstream.close()
            return
        threading.Thread(target=pump, args=(upstream, conn), daemon=True).start()
        pump(conn, upstream)

    def serve() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()


def test_a_start_the_engine_left_unanswered_is_not_run_again(state: Path,
                                                             tmp_path: Path) -> None:
    """The start was sent and the command runs, but its answer never came back: an error
    saying so, never the full path's second run of the same command."""
    from devcell.backends.container.engine import engine_address

    proxy = str(tmp_path / "engine.sock")
    _proxy_dropping_the_starts_answer(proxy, engine_address().removeprefix("unix://"))
    env = dict(_env(state), DOCKER_HOST=f"unix://{proxy}")
    ran = subprocess.run([sys.executable, "-m", "devcell", "exec", "box", "--", "sh", "-c",
                          "echo ran >> /tmp/runs; echo started"], capture_output=True, env=env, cwd=REPO,
                         timeout=120)
    assert ran.returncode == 1
    assert ran.stderr.decode().startswith(
        "error: exec in cell box: the Docker engine did not answer the start of the command")
    assert b"it may have run, so it was not run again" in ran.stderr
    time.sleep(0.5)
    runs = devcell(state, "exec", "box", "--", "cat", "/tmp/runs")
    assert runs.stdout == b"ran\n", runs.stderr


def test_an_engine_that_never_answers_is_said_at_once_as_the_full_path_says_it(
        state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It takes connections and says nothing: the full path waited 2 x 30 s to say so, and
    the fast path 30 s more before handing over to it."""
    import socket

    from devcell.api import exec_fast
    from devcell.backends.container import exec_socket
    from devcell.errors import BackendUnavailable

    path = str(tmp_path / "silent.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)  # connections queue, never answered
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    monkeypatch.setattr(exec_socket, "TIMEOUT_S", 0.3)
    try:
        with pytest.raises(BackendUnavailable) as raised:
            exec_fast.run(str(state), "box", ["true"], stdin=None, env=None, workdir=None)
    finally:
        server.close()
    assert str(raised.value).startswith(
        f"the container backend cannot reach the Docker engine at unix://{path} (timed out); "
        "start it with")


@pytest.mark.parametrize("words", [["exec"], ["exec", "-v"]], ids=["fast", "full"])
def test_output_that_cannot_be_written_here_is_said_as_such(state: Path,
                                                           words: list[str]) -> None:
    """stdout on a full disk: neither the engine's connection (the fast path said it broke)
    nor the state database (the full path said its disk was full) is to blame."""
    with open("/dev/full", "wb") as full:
        ran = subprocess.run([sys.executable, "-m", "devcell", *words, "box", "--", "head",
                              "-c", "1000000", "/dev/zero"], stdout=full,
                             stderr=subprocess.PIPE, env=_env(state), cwd=REPO, timeout=120)
    assert ran.returncode == 1
    assert ran.stderr.decode().splitlines()[-1] == (
        "error: exec in cell box: its output could not be written here (No space left on "
        "device)")
