"""POST /api/v1/nodes/NAME/drain (server/drains.py) on an in-process server over a unix
socket, with the fake backend and a crafted engine (tests/api/test_drain.py's `cluster`):
`devcell --server unix:... node drain` says what it says on the state directory (a refusal;
a lost node's cell moved from its pushed snapshot, which the fake backend cannot do), a
second drain of a node while one runs is 409 naming it, a client that leaves (or whose
stdout is closed) ends only its stream while the drain goes on to its end in the caller's
name, the drains at once are bounded, and over TLS a developer is refused (node-admin) while
an admin's drain is recorded in that admin's name. A drain on a single host is refused before its
stream: tests/server/test_app_auth.py and test_cli_remote.py (the session's daemon). A
real node drained through the server: tests/backends/container/test_swarm_workspaces.py.

Cost: ~5-7 s (the cells' applies, the CLI's runs in-process, a TLS certificate made).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell import errors
from devcell.api import drain
from devcell.auth import principals
from devcell.backends.container.swarm_cells import Volumes
from devcell.cli.main import main
from devcell.client import Client
from devcell.server import drains, serve
from devcell.server.problems import HttpProblem
from devcell.store import actor
from devcell.store.db import open_database
from tests.api.test_drain import REGISTRY, _node, cluster  # noqa: F401  (a fixture)
from tests.conftest import REPO

WAIT = 60.0
"""The longest a test waits for the server's drain thread (never reached when it works)."""


@pytest.fixture
def served(state_dir: Path, cluster: Callable[..., None],  # noqa: F811
           monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The API of the state directory served in this process on a unix socket (its URL);
    the engine's nodes: `lost` (down, holding the cell `api`), `busy` and `other`."""
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(state_dir.parent / "no-contexts.json"))
    cluster(_node("lost", state="down"), _node("busy"), _node("other"))
    where = Path(tempfile.mkdtemp(prefix="drain-", dir="/tmp"))  # a short socket path
    serving = serve.start(serve.Listen("unix", str(where / "api.sock")), state_dir)
    try:
        yield serving.shown
    finally:
        serving.stop()
        shutil.rmtree(where, ignore_errors=True)


LOGGED = re.compile(r"^\d\d:\d\d:\d\d\.\d+ [A-Z]+ .*\n", re.MULTILINE)
"""A log line: what an inline converge says while it runs (no daemon here; on the state
directory, and in this process the server's too), not the command's own lines."""


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), LOGGED.sub("", err.getvalue())


def _pushed(state_dir: Path) -> None:
    """A snapshot of `api` whose checkpoint's record says it is in the cluster's registry."""
    assert _run("--state-dir", str(state_dir), "snapshot", "create", "api", "--name",
                "kept")[0] == 0
    db = open_database(state_dir)
    try:
        (snap_id,) = db.conn.execute("SELECT id FROM snapshots WHERE name = 'kept'").fetchone()
    finally:
        db.close()
    Volumes(state_dir, "checkpoints").write(snap_id, {"pushed": {"registry": REGISTRY}})


def test_through_the_server_a_drain_says_what_it_says_on_the_state_directory(
        state_dir: Path, served: str) -> None:
    """The refusals (a lost node without --from-last-snapshot, a node that is not there),
    then a lost node's cell moved from its pushed snapshot: its lines, streamed, and its exit
    status (1: the fake backend cannot move a workspace, so the node is not drained), the
    same as the command's on the state directory run right after."""
    local = ("--state-dir", str(state_dir))
    remote = ("--server", served)
    for argv in (["node", "drain", "lost"], ["node", "drain", "nope"]):
        assert _run(*remote, *argv) == _run(*local, *argv), argv
    _pushed(state_dir)
    code, out, err = _run(*remote, "node", "drain", "lost", "--from-last-snapshot")
    assert code == 1, (out, err)
    assert out.startswith("cell/api moving from snapshot/kept (taken "), out
    assert "error: cell/api is still on node lost: " in err, err
    assert err.endswith("error: node/lost not drained: cells are left on it; run `devcell "
                        "node drain` again\n"), err
    # a second run (the move pending now) says the same on both sides
    again = _run(*remote, "node", "drain", "lost", "--from-last-snapshot")
    assert again == _run(*local, "node", "drain", "lost", "--from-last-snapshot")
    assert again[0] == 1 and "still on node lost" in again[2], again


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, list[str]]]:
    """drain.move held until the event is set; it records who it acted as, and says one
    cell moved and the node drained."""
    release = threading.Event()
    acted: list[str] = []

    def move(state_dir: Path, node: Any, **kwargs: Any) -> drain.Drained:
        acted.append(f"began {actor.current()}")
        release.wait(WAIT)
        acted.append(f"ended {actor.current()}")
        return drain.Drained(node.id, moved=[("api", "other")], drained=True)

    monkeypatch.setattr(drain, "move", move)
    yield release, acted
    release.set()


def _began(acted: list[str]) -> None:
    for _ in range(int(WAIT / 0.05)):
        if acted:
            return
        threading.Event().wait(0.05)
    raise AssertionError("the drain did not begin")


def test_a_second_drain_of_a_node_is_409_and_a_client_leaving_ends_only_its_stream(
        state_dir: Path, served: str, held: tuple[threading.Event, list[str]]) -> None:
    release, acted = held
    dc = Client(served)
    lines: list[tuple[str, str]] = []
    first: list[Any] = []
    stream = threading.Thread(target=lambda: first.append(dc.drain_node(
        "busy", on_line=lambda s, t: lines.append((s, t)))), daemon=True)
    stream.start()
    _began(acted)
    with pytest.raises(errors.Conflict, match=r"node busy is being drained \(by "
                                              f"{actor.local_user()} since "):
        dc.drain_node("busy")
    assert _run("--server", served, "node", "drain", "busy")[0] == 1  # the same, said
    release.set()
    stream.join(WAIT)
    (result,) = first
    assert (result.exit_code, result.drained, result.moved) == (0, True, [("api", "other")])
    assert lines == [("stdout", "cell/api moved to node other"),
                     ("stdout", "node/busy drained")]

    # a client that reads the head and leaves: the drain goes on to its end, then the node
    # is free for the next
    release.clear()
    acted.clear()
    conn, response = dc._send("POST", "/api/v1/nodes/busy/drain", {})
    assert response.status == 200
    _began(acted)
    conn.close()
    release.set()
    for _ in range(int(WAIT / 0.05)):
        if len(acted) == 2:
            break
        threading.Event().wait(0.05)
    assert acted == [f"began {actor.local_user()}", f"ended {actor.local_user()}"]
    for _ in range(int(WAIT / 0.05)):  # its thread gives the node back once it has ended
        try:
            assert dc.drain_node("busy").exit_code == 0
            break
        except errors.Conflict:
            threading.Event().wait(0.05)
    else:
        raise AssertionError("the node was not given back")


def test_a_closed_stdout_ends_the_command_not_the_drain(
        served: str, held: tuple[threading.Event, list[str]]) -> None:
    """As on the state directory, a reader that went away (a pipe's read end closed) is
    exit 0 with nothing said; the server's drain still ends as it would have."""
    release, acted = held
    release.set()
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "devcell", "--server", served, "node",
                               "drain", "busy"], stdout=write, stderr=subprocess.PIPE,
                              cwd=REPO, timeout=WAIT, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, b"")
    assert acted[-1] == f"ended {actor.local_user()}"


def test_the_drain_acts_in_the_callers_name_and_drains_are_bounded(
        state_dir: Path, held: tuple[threading.Event, list[str]]) -> None:
    release, acted = held
    bounded = drains.Drains(total=1)
    bounded.take()
    with pytest.raises(HttpProblem) as refused:
        bounded.take()
    assert refused.value.status == 503 and "1 drains are running" in str(refused.value.detail)
    running = bounded.claim("n1", "ana")
    drains.start(bounded, running, state_dir, principals.Principal("ana", principals.Role.admin),
                 drain.Target("n1", False, None), 30.0)
    release.set()
    said = [running.lines.get(timeout=WAIT) for _ in range(3)]
    assert [line["type"] for line in said] == ["line", "line", "result"]
    assert said[-1]["exitCode"] == 0 and acted == ["began ana", "ended ana"]
    for _ in range(int(WAIT / 0.05)):  # the slot given back once its thread ended
        if not bounded.slots:
            break
        threading.Event().wait(0.05)
    assert bounded.slots == 0 and not bounded.running
    bounded.take()


def test_over_tls_the_drain_is_the_callers_and_an_admins(
        state_dir: Path, cluster: Callable[..., None],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the TLS listener with tokens: a developer's drain is refused by rule
    node-admin with nothing recorded; an admin's records the move, its operation and its
    events in that admin's name (not the server's owner's)."""
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(state_dir.parent / "no-contexts.json"))
    cluster(_node("lost", state="down"), _node("other"))
    _pushed(state_dir)
    made = {role: _run("--state-dir", str(state_dir), "token", "create", "--user",
                       f"u-{role}", "--role", role)[1].strip()
            for role in ("developer", "admin")}
    serving = serve.start(serve.parse_listen("tcp:127.0.0.1:0"), state_dir)
    try:
        ca = str(state_dir / "api-tls" / "cert.pem")
        with pytest.raises(errors.Forbidden, match="refused by rule node-admin"):
            Client(serving.shown, token=made["developer"], ca=ca).drain_node(
                "lost", from_last_snapshot=True)
        db = open_database(state_dir)
        try:
            assert not db.conn.execute("SELECT 1 FROM operations WHERE action = 'restore'"
                                       ).fetchall()
        finally:
            db.close()
        result = Client(serving.shown, token=made["admin"], ca=ca).drain_node(
            "lost", from_last_snapshot=True)
    finally:
        serving.stop()
    assert (result.exit_code, result.drained) == (1, False)
    assert [m[:2] for m in result.from_snapshots] == [("api", "kept")]
    db = open_database(state_dir)
    try:
        ops = db.conn.execute("SELECT actor FROM operations WHERE action = 'restore'"
                              ).fetchall()
        moved = db.conn.execute("SELECT actor FROM events WHERE reason = 'MoveFailed'"
                                ).fetchall()
    finally:
        db.close()
    assert [r[0] for r in ops] == ["u-admin"] and [r[0] for r in moved] == ["u-admin"]
