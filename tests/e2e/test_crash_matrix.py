"""The crash-point matrix: SIGKILL DevCell at every step boundary, restart, check what it finds.

Every case runs real processes on a private state directory. One `devcell` command (or a
daemon) is started with `DEVCELL_FAILPOINT=name:nth` and must die there (SIGKILL, no cleanup);
then the same command is run again without the failpoint (or the daemon is restarted), and:

- every apply that returned 0 is present, with the generation its accepted spec changes give;
- every operation the crash left Running is Failed, reason Interrupted, with the step in
  flight recorded (operations.current_step, operation_steps status 'Interrupted'), the steps
  after it never run (Skipped) and an OperationInterrupted event;
- each backend call matches one recorded step start and none was made twice: per
  (method, target) in the fake backend's call log (less the daemon's start-up orphan sweep,
  recorded as OrphanRemoved events), calls == started steps minus the steps
  killed before their call (exact for inline runs; bounded by Succeeded <= calls <= started
  for daemons, whose other workers may die mid-step); right after the crash the call for the
  step in flight was made exactly when the failpoint says so (before-call: no, after-call: yes);
- no fake-backend resource is unaccounted for by state.db (cells, volumes, checkpoints) and
  nothing is left frozen;
- `PRAGMA integrity_check` is ok on state.db and backends/fake.db;
- `devcell get cells/snapshots -o json` shows every object converged (phase == desired,
  observedGeneration == generation, Ready=True) within a bound.

The default run covers every point once ("run1ofN" in the test id: run 1 of the N that
exist); `DEVCELL_CRASH_MATRIX=full` collects the other runs too (nth = 2, 3, other variants).
`test_matrix_inventory` checks that every step named in devcell/controllers and every
failpoint of the issue is in the matrix, and prints the count (points x runs).

Retention is in the matrix too: `expire` (snapshots whose ttl ran out, expired by the next
inline converge: the expire step, the delete-checkpoint that frees them, the final commits)
and `schedule` (cells given `snapshots: {every: 1s, retain: 1}`: the schedule-snapshot step
inline; in a daemon, a schedule step and a retain's expire step); after every restart no
period is taken twice and no expired snapshot keeps its checkpoint (`check_retention`).

`test_gc_crash` kills `devcell gc` at each of its points (planned, every removal step before
and after its call, the final commit, the next run's recovery): nothing referenced is lost,
and the next gc removes every leftover with each removal made exactly once.

Other e2e tests (test_daemon_*.py) reuse the World/Daemon helpers defined here.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from tests import processes

if TYPE_CHECKING:
    from devcell.backends.container.workspaces import WorkspaceStore

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
CMD_TIMEOUT = 60.0
CONVERGE_BOUND = 20.0  # seconds: a restart must converge (or fail explicitly) within this
FULL = os.environ.get("DEVCELL_CRASH_MATRIX", "").lower() == "full"
KILLED = -signal.SIGKILL

STEP_METHOD = {
    "create-volume": "create_volume", "delete-volume": "delete_volume",
    "delete-checkpoint": "delete_checkpoint", "create": "create", "start": "start",
    "stop": "stop", "delete": "delete", "quiesce": "quiesce", "checkpoint": "checkpoint",
    "resume": "resume", "adopt-volume": None, "adopt-checkpoint": None,
    "restore-workspace": "restore_workspace",
    "expire": None, "schedule-snapshot": None,
}
"""Recorded step name -> the fake backend method it calls (adoption calls nothing)."""


# -- manifests ---------------------------------------------------------------------------------

def cell_doc(name: str, state: str = "Running", *, fork: str | None = None,
             labels: dict[str, str] | None = None) -> str:
    spec: dict[str, Any] = {"backend": "fake", "state": state}
    if fork:
        spec["workspace"] = {"from": {"snapshot": fork}}
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return yaml.safe_dump({"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell",
                           "metadata": meta, "spec": spec}, sort_keys=False)


def snap_doc(name: str, cell: str, ttl: str | None = None) -> str:
    spec = {"cell": cell, **({"ttl": ttl} if ttl else {})}
    return yaml.safe_dump({"apiVersion": "devcell.dev/v1alpha1", "kind": "Snapshot",
                           "metadata": {"name": name}, "spec": spec}, sort_keys=False)


SCHEDULED_LABEL = "devcell.dev/scheduled-by"
"""Snapshots a cell's schedule took: not accepted objects of any apply, judged apart."""
TTL = 2.0
"""Seconds: the ttl of the `ttl` manifests (long enough to survive the template's apply)."""


def docs_in(path: Path) -> list[dict[str, Any]]:
    files = sorted(p for p in path.rglob("*.yaml")) if path.is_dir() else [path]
    out: list[dict[str, Any]] = []
    for f in files:
        out.extend(d for d in yaml.safe_load_all(f.read_text()) if d)
    return out


# -- processes ---------------------------------------------------------------------------------

def devcell_env(state: Path, failpoint: str | None = None) -> dict[str, str]:
    env = dict(os.environ, DEVCELL_HOME=str(state))
    for var in ("DEVCELL_FAKE_FAIL", "DEVCELL_FAILPOINT"):
        env.pop(var, None)
    if failpoint:
        env["DEVCELL_FAILPOINT"] = failpoint
    return env


def no_lock_errors(text: str) -> None:
    assert "database is locked" not in text, text
    assert "Traceback" not in text, text


def daemon_log_clean(text: str, **_ignored: bool) -> None:
    """No "database is locked" and no traceback in a daemon's log. (It once tolerated two
    known races, the fake backend's WAL switch and logging inside the signal handler; both
    are fixed, so nothing is tolerated any more.)"""
    blocks = re.split(r"(?=Traceback \(most recent call last\))", text)[1:]
    assert not blocks, "traceback in the daemon log:\n" + "\n".join(b[:3000] for b in blocks)
    assert "database is locked" not in text, text[-5000:]
    assert "Logging error" not in text, text[-5000:]


def watching(pid: int) -> bool:
    """The process has an inotify instance (watchfiles has started watching): Linux only.

    Tests that change files after a start wait for this first, so they test the watch, not
    the startup sync (which also catches such files since DAEMON_STARTUP_GAP was fixed)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify":
                return True
        except OSError:
            continue
    return False


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every long-running process a test starts; killed (by pid) at teardown if still alive."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass


def ro(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


@dataclass
class Crash:
    """What one crash left behind: the operations it interrupted and their steps in flight."""

    failpoint: str
    running: dict[str, str] = field(default_factory=dict)  # op id -> step in flight


@dataclass
class World:
    """A state directory plus what the tests know was accepted into it."""

    root: Path
    manifests: Path
    accepted: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """(kind, name) -> {"spec": ..., "generation": n} for every object of an apply that returned 0."""
    crashes: list[Crash] = field(default_factory=list)
    missing: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(method, target) of steps killed before their backend call."""
    exact_calls: bool = True
    """False once a daemon crashed: other workers may have died mid-call."""
    expect_expired: set[str] = field(default_factory=set)
    """Snapshots whose ttl ran out before the command: Expired (not live) after the restart."""
    log: list[str] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.root / "state"

    def clone(self, root: Path) -> World:
        """A copy of this world's state directory (manifests are shared, read-only)."""
        root.mkdir(parents=True, exist_ok=True)
        if self.state.exists():
            shutil.copytree(self.state, root / "state")
        twin = copy.deepcopy(self)
        twin.root = root
        twin.log = []
        return twin

    # -- running devcell ---------------------------------------------------------------------

    def run(self, *args: str, failpoint: str | None = None, timeout: float = CMD_TIMEOUT
            ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([PY, "-m", "devcell", *args], capture_output=True, text=True,
                              env=devcell_env(self.state, failpoint), cwd=REPO, timeout=timeout)
        self.log.append(f"$ {'DEVCELL_FAILPOINT=' + failpoint + ' ' if failpoint else ''}"
                        f"devcell {' '.join(args)} -> {proc.returncode}\n{proc.stdout}{proc.stderr}")
        return proc

    def ok(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.run(*args)
        assert proc.returncode == 0, self.transcript()
        no_lock_errors(proc.stderr)
        return proc

    def transcript(self) -> str:
        return "\n".join(self.log[-8:])

    def apply(self, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        proc = self.ok("apply", "-f", str(path), "--timeout", f"{CONVERGE_BOUND:g}s", *extra)
        self.accept(path)
        return proc

    def keep_pruned(self, cell: str) -> None:
        """A pruned cell leaves one safety snapshot of its workspace (ttl: the 24 h default),
        taken once whatever the crashes."""
        self.accepted[("Snapshot", f"{cell}-pruned-1")] = {
            "spec": {"cell": cell, "ttl": "1d"}, "generation": 1}

    def accept(self, path: Path) -> None:
        """Record the objects of `path` as accepted (an apply of them returned 0)."""
        for d in docs_in(path):
            key = (d["kind"], d["metadata"]["name"])
            old = self.accepted.get(key)
            generation = 1 if old is None else old["generation"] + (old["spec"] != d["spec"])
            self.accepted[key] = {"spec": d["spec"], "generation": generation}

    def forget(self, path: Path) -> None:
        for d in docs_in(path):
            self.accepted.pop((d["kind"], d["metadata"]["name"]), None)

    def delete(self, path: Path) -> subprocess.CompletedProcess[str]:
        proc = self.ok("delete", "-f", str(path), "--timeout", f"{CONVERGE_BOUND:g}s")
        self.forget(path)
        return proc

    def crash(self, *args: str, failpoint: str) -> Crash:
        """Run a command that must die at `failpoint`; check what it left behind."""
        before = self.running_ops()
        proc = self.run(*args, failpoint=failpoint)
        assert proc.returncode == KILLED, (
            f"expected SIGKILL at {failpoint}, got exit {proc.returncode}\n{self.transcript()}")
        return self.after_crash(failpoint, before, exact=True)

    def after_crash(self, failpoint: str, before: dict[str, str], *, exact: bool) -> Crash:
        crash = Crash(failpoint, {op: step for op, step in self.running_ops().items()
                                  if op not in before})
        name, _, _ = failpoint.partition(":")
        if name.startswith("step."):
            step = name.split(".")[1]
            assert step in crash.running.values(), (
                f"{failpoint}: no operation left Running at step {step}: {crash.running}")
        if name == "op.before-commit":
            assert crash.running, f"{failpoint}: no operation left Running"
        if name.startswith("apply.") or name in ("recover.before-commit", "daemon.started"):
            if exact:
                assert not crash.running, f"{failpoint} left new operations Running: {crash.running}"
        if exact and (name.startswith("step.") or name == "op.before-commit"):
            (op_id, step), = crash.running.items()
            self._check_call_of_step_in_flight(op_id, step, made=not name.endswith("before-call"))
        if not exact:
            self.exact_calls = False
        if name.endswith("before-call") and exact:
            (op_id, step), = crash.running.items()
            target = self.step_targets().get((op_id, step))
            method = STEP_METHOD[step]
            if method and target:
                self.missing[(method, target)] += 1
        self.crashes.append(crash)
        return crash

    # -- reading the databases ---------------------------------------------------------------

    def db(self) -> sqlite3.Connection:
        return ro(self.state / "state.db")

    def fake(self) -> sqlite3.Connection:
        return ro(self.state / "backends" / "fake.db")

    def running_ops(self) -> dict[str, str]:
        if not (self.state / "state.db").exists():
            return {}
        with self.db() as conn:
            rows = conn.execute(
                "SELECT o.id, s.name FROM operations o LEFT JOIN operation_steps s "
                "ON s.op_id = o.id AND s.status = 'Running' WHERE o.status = 'Running'").fetchall()
        return {r[0]: r[1] for r in rows}

    def step_targets(self) -> dict[tuple[str, str], str]:
        """(op id, step name) -> the fake backend call target (the cell's name)."""
        out = {}
        with self.db() as conn:
            for r in conn.execute(
                    "SELECT s.op_id, s.name, o.object_kind, o.object_name, o.object_id "
                    "FROM operation_steps s JOIN operations o ON o.id = s.op_id"):
                out[(r[0], r[1])] = self._target(conn, r[2], r[3], r[4])
        return out

    @staticmethod
    def _target(conn: sqlite3.Connection, kind: str, name: str, object_id: str) -> str:
        if kind == "Cell":
            return name
        row = conn.execute("SELECT json_extract(spec, '$.cell') FROM snapshots WHERE id = ?",
                           (object_id,)).fetchone()
        return row[0] if row else name

    def calls(self) -> Counter[tuple[str, str]]:
        """The fake backend's successful calls, per (method, owning cell name)."""
        path = self.state / "backends" / "fake.db"
        if not path.exists():
            return Counter()
        with self.fake() as fake:
            rows = fake.execute("SELECT method, target FROM calls WHERE outcome = 'ok'").fetchall()
        with self.db() as conn:
            return Counter((m, self._owner(conn, t)) for m, t in rows)

    @staticmethod
    def _owner(conn: sqlite3.Connection, target: str) -> str:
        """The fake logs a volume's or checkpoint's id when it no longer knows its owner."""
        if target.startswith("vol_"):
            row = conn.execute("SELECT c.name FROM volumes v JOIN cells c ON c.id = v.cell_id "
                               "WHERE v.id = ?", (target,)).fetchone()
            return row[0] if row else target
        if target.startswith("snap_"):
            row = conn.execute("SELECT json_extract(spec, '$.cell') FROM snapshots WHERE id = ?",
                               (target,)).fetchone()
            return row[0] if row else target
        if target.startswith("cell_"):
            row = conn.execute("SELECT name FROM cells WHERE id = ?", (target,)).fetchone()
            return row[0] if row else target
        if target.startswith("sleep-"):
            cell_id = target[len("sleep-"):].rsplit("-g", 1)[0]
            row = conn.execute("SELECT name FROM cells WHERE id = ?", (cell_id,)).fetchone()
            return row[0] if row else target
        return target

    def step_counts(self) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
        """(started, succeeded) steps per (method, target)."""
        started: Counter[tuple[str, str]] = Counter()
        succeeded: Counter[tuple[str, str]] = Counter()
        with self.db() as conn:
            for r in conn.execute(
                    "SELECT s.name, s.status, o.object_kind, o.object_name, o.object_id "
                    "FROM operation_steps s JOIN operations o ON o.id = s.op_id "
                    "WHERE s.started_at IS NOT NULL"):
                method = STEP_METHOD[r[0]]
                if method is None:
                    continue
                key = (method, self._target(conn, r[2], r[3], r[4]))
                started[key] += 1
                if r[1] == "Succeeded":
                    succeeded[key] += 1
        return started, succeeded

    def _check_call_of_step_in_flight(self, op_id: str, step: str, *, made: bool) -> None:
        method = STEP_METHOD[step]
        if method is None:
            return
        target = self.step_targets()[(op_id, step)]
        started, _ = self.step_counts()
        key = (method, target)
        calls = self.calls()[key]
        expected = started[key] - self.missing[key] - (0 if made else 1)
        assert calls == expected, (
            f"step {step} of {op_id} ({method} {target}): {calls} backend calls, expected "
            f"{expected} ({started[key]} recorded starts, {self.missing[key]} earlier steps "
            f"killed before their call, this one {'after' if made else 'before'} its call)")

    # -- the checks after a restart ----------------------------------------------------------

    def check_all(self, *, converged: bool = True) -> None:
        self.check_integrity()
        self.check_interrupted()
        self.check_calls()
        self.check_accounting()
        self.check_retention()
        if converged:
            self.check_converged()

    def check_retention(self) -> None:
        """No scheduled period taken twice; an expired snapshot holds no checkpoint; the
        snapshots whose ttl ran out are Expired, not live."""
        with self.db() as conn, self.fake() as fake:
            twice = conn.execute(
                "SELECT name, count(*) FROM snapshots WHERE json_extract(labels, "
                f"'$.\"{SCHEDULED_LABEL}\"') IS NOT NULL GROUP BY name HAVING count(*) > 1"
            ).fetchall()
            assert not twice, f"scheduled periods taken twice: {[tuple(r) for r in twice]}"
            held = {r[0] for r in fake.execute("SELECT id FROM checkpoints")}
            expired = {r[0]: r[1] for r in conn.execute(
                "SELECT id, name FROM snapshots WHERE phase = 'Expired'")}
            kept = sorted(name for sid, name in expired.items() if sid in held)
            assert not kept, f"expired snapshots still hold their checkpoints: {kept}"
            for name in sorted(self.expect_expired):
                live = conn.execute("SELECT phase FROM snapshots WHERE name = ? AND "
                                    "deleted_at IS NULL", (name,)).fetchone()
                assert live is None, f"snapshot {name}: its ttl ran out, still live ({live[0]})"
                assert name in expired.values(), f"snapshot {name} is not recorded Expired"

    def check_integrity(self) -> None:
        for path in (self.state / "state.db", self.state / "backends" / "fake.db"):
            if path.exists():
                with ro(path) as conn:
                    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok", path
                    assert conn.execute("PRAGMA foreign_key_check").fetchall() == [], path

    def check_interrupted(self) -> None:
        with self.db() as conn:
            still = conn.execute("SELECT id, current_step FROM operations "
                                 "WHERE status = 'Running'").fetchall()
            assert not still, f"operations still Running after the restart: {[tuple(r) for r in still]}"
            assert not conn.execute("SELECT 1 FROM operation_steps WHERE status = 'Running'"
                                    ).fetchall()
            for crash in self.crashes:
                for op_id, step in crash.running.items():
                    op = conn.execute("SELECT * FROM operations WHERE id = ?", (op_id,)).fetchone()
                    where = f"{crash.failpoint}: operation {op_id}"
                    assert (op["status"], op["reason"]) == ("Failed", "Interrupted"), (
                        f"{where} is {op['status']}/{op['reason']}, not Failed/Interrupted")
                    assert op["current_step"] == step, (
                        f"{where} records step {op['current_step']!r}, in flight was {step!r}")
                    rows = conn.execute("SELECT name, status FROM operation_steps WHERE op_id = ? "
                                        "ORDER BY idx", (op_id,)).fetchall()
                    statuses = [(r[0], r[1]) for r in rows]
                    interrupted = [n for n, s in statuses if s == "Interrupted"]
                    assert interrupted == [step], f"{where}: steps {statuses}"
                    at = next(i for i, (n, s) in enumerate(statuses) if s == "Interrupted")
                    assert all(s in ("Skipped", "Pending") for _, s in statuses[at + 1:]), (
                        f"{where}: a step after the interrupted one ran (replayed?): {statuses}")
                    assert conn.execute(
                        "SELECT 1 FROM events WHERE op_id = ? AND reason = 'OperationInterrupted'",
                        (op_id,)).fetchone(), f"{where}: no OperationInterrupted event"

    def swept(self) -> Counter[tuple[str, str]]:
        """Backend calls made by the daemon's start-up orphan sweep, each recorded as an
        OrphanRemoved event instead of an operation step."""
        method = {"cell": "delete", "volume": "delete_volume", "checkpoint": "delete_checkpoint"}
        out: Counter[tuple[str, str]] = Counter()
        with self.db() as conn:
            for (message,) in conn.execute("SELECT message FROM events "
                                           "WHERE reason = 'OrphanRemoved'"):
                found = re.search(r"\b(cell|volume|checkpoint) \S+ \(owner (\S+)\)", message)
                if found:
                    out[(method[found[1]], self._owner(conn, found[2]))] += 1
        return out

    def check_calls(self) -> None:
        started, succeeded = self.step_counts()
        calls = self.calls()
        calls.subtract(self.swept())
        problems = []
        for key in sorted(set(started) | set(calls)):
            if self.exact_calls:
                want = started[key] - self.missing[key]
                if calls[key] != want:
                    problems.append(f"{key}: {calls[key]} calls, {started[key]} recorded step "
                                    f"starts, {self.missing[key]} killed before the call")
            elif not succeeded[key] <= calls[key] <= started[key]:
                problems.append(f"{key}: {calls[key]} calls, {started[key]} recorded step starts, "
                                f"{succeeded[key]} succeeded")
        assert not problems, "backend calls do not match recorded steps:\n" + "\n".join(problems)

    def check_accounting(self) -> None:
        """Every fake-backend resource is known to state.db; nothing is left frozen."""
        with self.db() as conn, self.fake() as fake:
            live_cells = {r[0]: r[1] for r in conn.execute(
                "SELECT id, deleting_at FROM cells WHERE deleted_at IS NULL")}
            live_volumes = {r[0]: r[1] for r in conn.execute(
                "SELECT id, cell_id FROM volumes WHERE deleted_at IS NULL")}
            known_checkpoints = {r[0] for r in conn.execute(
                "SELECT id FROM snapshots WHERE deleted_at IS NULL AND "
                "(checkpoint_ref IS NOT NULL OR deleting_at IS NOT NULL)")}
            known_checkpoints |= {r[0] for r in conn.execute(
                "SELECT json_extract(status, '$.sleep.checkpointId') FROM cells "
                "WHERE deleted_at IS NULL UNION SELECT json_extract(status, "
                "'$.sleep.supersedes') FROM cells WHERE deleted_at IS NULL") if r[0]}
            problems = []
            for cid, name, frozen in fake.execute("SELECT id, name, frozen FROM cells"):
                if cid not in live_cells:
                    problems.append(f"fake cell {name} ({cid}) is not a live cell in state.db")
                if frozen:
                    problems.append(f"fake cell {name} ({cid}) was left frozen (quiesced)")
            for vid, name in fake.execute("SELECT id, cell_name FROM volumes"):
                if vid not in live_volumes:
                    problems.append(f"fake volume {vid} of {name} is not a live volume in state.db")
                elif live_volumes[vid] not in live_cells:
                    problems.append(f"fake volume {vid} belongs to a deleted cell {name}")
            for (ckpt,) in fake.execute("SELECT id FROM checkpoints"):
                if ckpt not in known_checkpoints:
                    problems.append(f"fake checkpoint {ckpt} is not recorded in state.db")
            fake_volumes = {r[0] for r in fake.execute("SELECT id FROM volumes")}
            for vid in live_volumes:
                if vid not in fake_volumes:
                    problems.append(f"state.db volume {vid} does not exist in the backend")
            fake_ckpts = {r[0] for r in fake.execute("SELECT id FROM checkpoints")}
            for (sid, name) in conn.execute("SELECT id, name FROM snapshots WHERE deleted_at IS "
                                            "NULL AND checkpoint_ref IS NOT NULL"):
                if sid not in fake_ckpts:
                    problems.append(f"snapshot {name} is recorded as taken; its checkpoint is gone")
        assert not problems, "\n".join(problems)

    def check_converged(self) -> None:
        """`devcell get -o json` shows exactly the accepted objects, each settled as desired."""
        got: dict[tuple[str, str], dict[str, Any]] = {}
        for kind, plural in (("Cell", "cells"), ("Snapshot", "snapshots")):
            proc = self.ok("get", plural, "-o", "json")
            for item in json.loads(proc.stdout)["items"]:
                if SCHEDULED_LABEL in item["metadata"].get("labels", {}) or \
                        item["status"].get("phase") == "Expired":
                    continue  # taken by a schedule, or an expired record: checked apart
                got[(kind, item["metadata"]["name"])] = item
        assert set(got) == set(self.accepted), (
            f"live objects {sorted(got)} != accepted {sorted(self.accepted)}")
        problems = []
        for key, item in got.items():
            want = self.accepted[key]
            status = item["status"]
            phase = want["spec"].get("state", "Running") if key[0] == "Cell" else "Ready"
            ready: dict[str, Any] = next(
                (c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
            if status.get("phase") != phase or ready.get("status") != "True":
                problems.append(f"{key}: phase {status.get('phase')} (want {phase}), Ready "
                                f"{ready.get('status')}: {ready.get('message')}")
            gen = item["metadata"]["generation"]
            if gen != want["generation"]:
                problems.append(f"{key}: generation {gen}, accepted spec changes give "
                                f"{want['generation']}")
            if status.get("observedGeneration") != gen:
                problems.append(f"{key}: observedGeneration {status.get('observedGeneration')} "
                                f"!= generation {gen}")
        with self.fake() as fake:
            actual = {r[0]: r[1] for r in fake.execute("SELECT name, state FROM cells")}
        with self.db() as conn:
            sleeps = {r[0]: r[1] for r in conn.execute(
                "SELECT name, json_extract(status, '$.sleep.checkpointId') FROM cells "
                "WHERE deleted_at IS NULL")}
        with self.fake() as fake:
            ckpts = {r[0] for r in fake.execute("SELECT id FROM checkpoints")}
        for (kind, name), want in self.accepted.items():
            if kind != "Cell":
                continue
            state = want["spec"].get("state", "Running")
            expect = {"Running": ("running",), "Stopped": ("created", "stopped"),
                      "Sleeping": (None,)}[state]
            if actual.get(name) not in expect:
                problems.append(f"cell {name}: backend says {actual.get(name)}, desired {state}")
            if state == "Sleeping" and sleeps.get(name) not in ckpts:
                problems.append(f"cell {name} is Sleeping but its sleep checkpoint "
                                f"{sleeps.get(name)!r} is not in the backend")
        assert not problems, "\n".join(problems)


# -- daemons -----------------------------------------------------------------------------------

class Daemon:
    """`devcell controller run` as a real process; its log goes to a file."""

    def __init__(self, world: World, procs: list[subprocess.Popen[bytes]], watched: Path, *,
                 failpoint: str | None = None, args: tuple[str, ...] = ()) -> None:
        self.world = world
        n = sum(1 for _ in world.root.glob("daemon-*.log"))
        self.log_path = world.root / f"daemon-{n}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [PY, "-m", "devcell", "controller", "run", "--manifests", str(watched), *args],
                stdout=log, stderr=subprocess.STDOUT, env=devcell_env(world.state, failpoint),
                cwd=REPO, preexec_fn=processes.child_setup)
        procs.append(self.proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"daemon did not exit within {timeout} s\n{self.text()[-3000:]}"
                                 ) from None

    def wait_started(self, timeout: float = CONVERGE_BOUND) -> None:
        """Until this process has recorded itself as the controller (its signal handlers are
        installed by then; a SIGTERM earlier would meet Python's default handler)."""
        def up() -> bool:
            try:
                with self.world.db() as conn:
                    row = conn.execute("SELECT pid, stopped_at FROM controllers").fetchone()
            except sqlite3.OperationalError:
                return False
            return row is not None and row[0] == self.pid and row[1] is None

        self.wait_for(f"daemon {self.pid} to start", up, timeout)

    def wait_watching(self, timeout: float = CONVERGE_BOUND) -> None:
        self.wait_for(f"daemon {self.pid} to watch its directory", lambda: watching(self.pid),
                      timeout)

    def terminate(self, timeout: float = 10.0) -> int:
        self.wait_started()
        self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = CONVERGE_BOUND,
                 interval: float = 0.02) -> float:
        start = time.monotonic()
        while not predicate():
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited ({self.proc.returncode}) while waiting for "
                                     f"{what}\n{self.text()[-3000:]}")
            if time.monotonic() - start > timeout:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}\n"
                                     f"{self.text()[-3000:]}")
            time.sleep(interval)
        return time.monotonic() - start


def settled(world: World) -> bool:
    """Every accepted object converged in state.db, nothing is in flight (no subprocess), and
    the backend agrees: no cell is left frozen (a daemon repairs that in the cell's own turn,
    which waits while a snapshot of that cell is being reconciled)."""
    path = world.state / "state.db"
    if not path.exists():
        return False
    try:
        with world.db() as conn:
            if conn.execute("SELECT 1 FROM operations WHERE status = 'Running'").fetchone():
                return False
            live = {}
            for kind, table in (("Cell", "cells"), ("Snapshot", "snapshots")):
                for r in conn.execute(f"SELECT name, phase, generation, observed_generation, "
                                      f"spec, deleting_at FROM {table} WHERE deleted_at IS NULL "
                                      f"AND json_extract(labels, '$.\"{SCHEDULED_LABEL}\"') "
                                      "IS NULL"):
                    live[(kind, r[0])] = r
    except sqlite3.OperationalError:
        return False
    if set(live) != set(world.accepted):
        return False
    for key, r in live.items():
        want = world.accepted[key]
        phase = want["spec"].get("state", "Running") if key[0] == "Cell" else "Ready"
        if r[1] != phase or r[2] != want["generation"] or r[3] != r[2] or r[5] is not None:
            return False
    if not (world.state / "backends" / "fake.db").exists():
        return True
    try:
        with world.fake() as fake:
            return fake.execute("SELECT 1 FROM cells WHERE frozen").fetchone() is None
    except sqlite3.OperationalError:
        return False


# -- the matrix --------------------------------------------------------------------------------

NAMES = ("a", "b", "c")


def write_manifests(root: Path) -> Path:
    """Every manifest set the scenarios use, written once per template (paths are recorded)."""
    m = root / "m"
    for n in NAMES:
        for sub, text in (("cells", cell_doc(n)), ("sleep", cell_doc(n, "Sleeping"))):
            (m / sub).mkdir(parents=True, exist_ok=True)
            (m / sub / f"{n}.yaml").write_text(text)
    (m / "update").mkdir()
    (m / "update" / "a.yaml").write_text(cell_doc("a", "Stopped"))   # spec change: gen 2
    (m / "update" / "b.yaml").write_text(cell_doc("b", labels={"tier": "x"}))  # labels only
    (m / "update" / "c.yaml").write_text(cell_doc("c"))               # unchanged
    (m / "snaps").mkdir()
    for i, n in enumerate(NAMES, 1):
        (m / "snaps" / f"s{i}.yaml").write_text(snap_doc(f"s{i}", n))
    (m / "forks").mkdir()
    for i in range(1, 4):
        (m / "forks" / f"f{i}.yaml").write_text(cell_doc(f"f{i}", fork=f"s{i}"))
    (m / "ttl").mkdir()
    for i, n in enumerate(NAMES, 1):
        (m / "ttl" / f"t{i}.yaml").write_text(snap_doc(f"t{i}", n, ttl=f"{TTL:g}s"))
    (m / "sched").mkdir()
    for n in NAMES:
        doc = yaml.safe_load(cell_doc(n))
        doc["spec"]["snapshots"] = {"every": "1s", "retain": 1}
        (m / "sched" / f"{n}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return m


TEMPLATES: dict[str, list[str]] = {
    # template name -> directories applied (or deleted) in order, each must return 0
    "empty": [],
    "cells": ["cells"],
    "snaps": ["cells", "snaps"],
    "asleep": ["cells", "sleep"],
    "woken": ["cells", "sleep", "cells"],
    "ttl": ["cells", "ttl"],
}


@dataclass(frozen=True)
class Case:
    scenario: str
    point: str  # failpoint name
    run: int  # 1-based; the run's meaning (nth, or a variant) is the scenario's
    runs: int
    template: str
    crashes: tuple[tuple[str, str], ...]  # (command key, failpoint with nth) each must SIGKILL
    restart: str  # command key run afterwards, must return 0
    mode: str = "inline"  # or "daemon"

    @property
    def id(self) -> str:
        return f"{self.mode}/{self.scenario}/{self.point}/run{self.run}of{self.runs}"


def _steps(*names: str) -> list[str]:
    return [f"step.{n}.{edge}" for n in names for edge in ("before-call", "after-call")]


def build_cases() -> list[Case]:
    cases: list[Case] = []

    def add(scenario: str, template: str, command: str, points: list[str], *,
            nths: tuple[int, ...] = (1, 2, 3), restart: str | None = None) -> None:
        for point in points:
            for i, nth in enumerate(nths, 1):
                cases.append(Case(scenario, point, i, len(nths), template,
                                  ((command, f"{point}:{nth}"),), restart or command))

    applies = ["apply.before-write", "apply.before-commit", "apply.after-commit"]
    # apply: one hit per process; the runs are a first apply and a spec update
    for point in applies:
        cases.append(Case("apply", point, 1, 2, "empty", (("apply cells", point),), "apply cells"))
        cases.append(Case("apply", point, 2, 2, "cells", (("apply update", point),),
                          "apply update"))
    add("create", "empty", "apply cells",
        _steps("create-volume", "create", "start") + ["op.before-commit"])
    add("update", "cells", "apply update", _steps("stop") + ["op.before-commit"], nths=(1,))
    add("snapshot", "cells", "apply snaps",
        _steps("quiesce", "checkpoint", "resume") + ["op.before-commit"])
    add("fork", "snaps", "apply forks",
        _steps("create-volume", "create", "start") + ["op.before-commit"])
    add("delete", "cells", "delete cells",
        _steps("stop", "delete", "delete-volume") + ["op.before-commit"])
    add("delete-snapshot", "snaps", "delete snaps",
        _steps("delete-checkpoint") + ["op.before-commit"])
    add("sleep", "cells", "apply sleep",
        _steps("quiesce", "checkpoint", "delete") + ["op.before-commit"])
    add("wake", "asleep", "apply cells", _steps("create", "start") + ["op.before-commit"])
    add("resleep", "woken", "apply sleep", _steps("delete-checkpoint"))
    # `snapshot restore s1 --approve` of cell a: stop, safety checkpoint, restore, start
    add("restore", "snaps", "restore s1",
        _steps("stop", "checkpoint", "restore-workspace", "start") + ["op.before-commit"],
        nths=(1,))
    add("delete-asleep", "asleep", "delete cells",
        _steps("delete-volume", "delete-checkpoint") + ["op.before-commit"])
    # retention: the next inline converge expires the ttl snapshots (nth 1..3 = t1..t3); a
    # spec that adds a schedule takes each cell's due snapshot (nth 1..3 = a, b, c)
    add("expire", "ttl", "expire ttl",
        _steps("expire", "delete-checkpoint") + ["op.before-commit"])
    add("schedule", "cells", "apply sched", _steps("schedule-snapshot") + ["op.before-commit"])
    # `apply --prune` after b.yaml and c.yaml were removed: two cells pruned (nth 1 = b, 2 = c)
    add("prune", "private", "prune cells", applies, nths=(1,))
    add("prune", "private", "prune cells",
        _steps("stop", "delete", "delete-volume") + ["op.before-commit"], nths=(1, 2))

    # inside recovery: a first crash leaves an operation Running; the restart dies again,
    # inside recovery itself or in the steps that repair what the first crash left
    for i, (first_cmd, first) in enumerate((("apply cells", "step.create-volume.after-call:1"),
                                            ("apply snaps", "step.checkpoint.after-call:2"),
                                            ("delete cells", "step.delete.after-call:3")), 1):
        template = {"apply cells": "empty", "apply snaps": "cells", "delete cells": "cells"}[first_cmd]
        cases.append(Case("recovery", "recover.before-commit", i, 3, template,
                          ((first_cmd, first), (first_cmd, "recover.before-commit")), first_cmd))
    for point in _steps("adopt-volume"):
        for i, (cmd, template) in enumerate((("apply cells", "empty"), ("apply forks", "snaps"),
                                             ("apply cells", "empty")), 1):
            first = f"step.create-volume.after-call:{3 if i == 3 else 1}"
            cases.append(Case("recovery", point, i, 3, template,
                              ((cmd, first), (cmd, f"{point}:1")), cmd))
    for point in _steps("adopt-checkpoint"):
        for i in (1, 2, 3):
            cases.append(Case("recovery", point, i, 3, "cells",
                              (("apply snaps", f"step.checkpoint.after-call:{i}"),
                               ("apply snaps", f"{point}:1")), "apply snaps"))
    for point in _steps("resume"):
        # a snapshot killed after quiesce leaves its cell frozen; the restart's resume dies
        for i in (1, 2, 3):
            cases.append(Case("recovery-resume", point, i, 3, "cells",
                              (("apply snaps", f"step.quiesce.after-call:{i}"),
                               ("apply snaps", f"{point}:1")), "apply snaps"))

    # daemons: the crash happens inside `devcell controller run`, which is then restarted
    daemon = [
        ("create", "cells", "step.start.before-call", (1, 2, 3)),
        ("create", "cells", "step.create-volume.after-call", (1, 2, 3)),
        ("snapshot", "snaps", "step.checkpoint.after-call", (1, 2, 3)),
        ("fork", "forks", "step.create-volume.after-call", (4, 5, 6)),
        ("prune", "prune", "step.delete.after-call", (1,)),
        ("prune", "prune", "step.delete-volume.before-call", (1,)),
        ("apply", "cells", "apply.before-commit", (1,)),
        ("startup", "cells", "daemon.started", (1,)),
        ("schedule", "sched", "step.schedule-snapshot.after-call", (2,)),
        ("retain", "sched", "step.expire.after-call", (1,)),
        ("recovery", "recover", "recover.before-commit", (1,)),
    ]
    for scenario, files, point, nths in daemon:
        for i, nth in enumerate(nths, 1):
            cases.append(Case(scenario, point, i, len(nths), "empty", (("daemon " + files,
                              f"{point}:{nth}"),), "daemon", mode="daemon"))
    return cases


CASES = build_cases()

SLEEP_CHECKPOINT_LEAK = (
    "BUG: a sleep interrupted after its checkpoint step (delete, delete-checkpoint, or the "
    "final commit) leaves the new sleep checkpoint in the backend but never records it: "
    "status.sleep is written only by finish(); the restart sees no runtime and settles as "
    "Sleeping, so the checkpoint is unaccounted for (and leaks when the cell is deleted)")
PRUNE_STUCK = (
    "BUG: after a crash during `apply --prune`, re-running the same `apply --prune` returns 0 "
    "but a cell whose deletion was requested and never reconciled stays deleting and Running "
    "for ever: prune_candidates() skips objects already deleting and nothing re-queues them")


def known_bug(case: Case) -> str | None:
    """Bugs the matrix found are fixed (sleep checkpoints are recorded at their step, an
    interrupted prune is finished by the next one); kept as a hook for the next ones."""
    return None


def _param(case: Case) -> Any:
    marks: list[Any] = []
    reason = known_bug(case)
    if reason:
        marks.append(pytest.mark.xfail(strict=True, reason=reason))
    return pytest.param(case, id=case.id, marks=marks)


def selected(mode: str) -> list[Any]:
    """Run 1 of every point by default; DEVCELL_CRASH_MATRIX=full collects every run."""
    return [_param(c) for c in CASES if c.mode == mode and (FULL or c.run == 1)]


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], World]:
    cache: dict[str, World] = {}
    manifests = write_manifests(tmp_path_factory.mktemp("manifests"))

    def get(name: str) -> World:
        if name == "private":  # manifests the case edits: built afresh for each case
            root = tmp_path_factory.mktemp("private")
            world = World(root, write_manifests(root))
            world.apply(world.manifests / "cells")
            return world
        if name not in cache:
            world = World(tmp_path_factory.mktemp(f"tpl-{name}"), manifests)
            for sub in TEMPLATES[name]:
                world.apply(manifests / sub)
            world.log = []
            cache[name] = world
        return cache[name]

    return get


def restore(world: World, snapshot: str, *, failpoint: str | None = None) -> Crash | None:
    """`devcell snapshot restore SNAPSHOT --approve`; once it returned 0, the safety snapshots
    it recorded are accepted objects (Ready, generation 1)."""
    args = ("snapshot", "restore", snapshot, "--approve", "--timeout", f"{CONVERGE_BOUND:g}s")
    if failpoint:
        return world.crash(*args, failpoint=failpoint)
    world.ok(*args)
    with world.db() as conn:
        for name, cell in conn.execute(
                "SELECT name, json_extract(spec, '$.cell') FROM snapshots "
                "WHERE source = 'restore' AND deleted_at IS NULL"):
            world.accepted[("Snapshot", name)] = {"spec": {"cell": cell}, "generation": 1}
    return None


def run_command(world: World, key: str, *, failpoint: str | None = None) -> Crash | None:
    verb, sub = key.split()
    if verb == "restore":
        return restore(world, sub, failpoint=failpoint)
    path = world.manifests / sub
    extra: tuple[str, ...] = ()
    if verb == "expire":  # let the ttl run out, then any inline converge expires them
        time.sleep(TTL + 0.2)
        world.expect_expired = {d["metadata"]["name"] for d in docs_in(path)}
        world.forget(path)
        verb, path = "apply", world.manifests / "cells"
    if sub == "sched":  # the cells' first period (1s after their creation) has begun
        time.sleep(1.1)
    if verb == "prune":
        verb, extra = "apply", ("--prune",)
        for name in ("b", "c"):
            (path / f"{name}.yaml").unlink(missing_ok=True)
    if failpoint:
        return world.crash(verb, "-f", str(path), "--timeout", f"{CONVERGE_BOUND:g}s", *extra,
                           failpoint=failpoint)
    if verb == "apply":
        world.apply(path, *extra)
        if extra:
            for name in ("b", "c"):
                if world.accepted.pop(("Cell", name), None) is not None:
                    world.keep_pruned(name)
    else:
        world.delete(path)
    return None


@pytest.mark.e2e
@pytest.mark.parametrize("case", selected("inline"))
def test_inline_crash(case: Case, templates: Callable[[str], World], tmp_path: Path) -> None:
    world = templates(case.template).clone(tmp_path)
    for key, failpoint in case.crashes:
        run_command(world, key, failpoint=failpoint)
    run_command(world, case.restart)
    try:
        world.check_all()
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- transcript ---\n{world.transcript()}") from None


def _daemon_files(world: World, files: str, watched: Path) -> None:
    m = world.manifests
    subs = {"cells": ["cells"], "snaps": ["cells", "snaps"], "forks": ["cells", "snaps", "forks"],
            "prune": ["cells"], "recover": ["cells"], "sched": ["sched"]}[files]
    for sub in subs:
        for f in sorted((m / sub).glob("*.yaml")):
            shutil.copy(f, watched / f.name)
    world.accept(watched)


@pytest.mark.e2e
@pytest.mark.parametrize("case", selected("daemon"))
def test_daemon_crash(case: Case, procs: list[subprocess.Popen[bytes]],
                      tmp_path: Path) -> None:
    manifests = write_manifests(tmp_path)
    world = World(tmp_path, manifests)
    watched = tmp_path / "watched"
    watched.mkdir()
    (key, failpoint), = case.crashes
    files = key.split()[1]
    if files == "recover":
        # an inline crash first, so the daemon starts with an interrupted operation to recover
        world.crash("apply", "-f", str(manifests / "cells"), failpoint="step.create.after-call:2")
    _daemon_files(world, files, watched)
    before = world.running_ops()
    daemon = Daemon(world, procs, watched, failpoint=failpoint)
    if files == "prune":
        daemon.wait_for("cells a, b, c Running", lambda: settled(world))
        daemon.wait_watching()
        (watched / "c.yaml").unlink()
        world.accepted.pop(("Cell", "c"))
        world.keep_pruned("c")
    rc = daemon.wait_exit(CONVERGE_BOUND)
    assert rc == KILLED, f"daemon exited {rc}, not killed at {failpoint}\n{daemon.text()}"
    world.after_crash(failpoint, before, exact=False)
    logs = daemon.text()
    for _ in range(3):
        restarted = Daemon(world, procs, watched)
        restarted.wait_for("convergence after the restart", lambda: settled(world))
        assert restarted.terminate() == 0, restarted.text()
        logs += restarted.text()
        if not _suspended_by_shutdown(world):
            break
        # A schedule every second may start an operation as the daemon is stopped: it is
        # suspended by the shutdown (as designed) and the next start resumes it.
    daemon_log_clean(logs)
    try:
        world.check_all()
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- restarted daemon ---\n{restarted.text()[-4000:]}"
                             ) from None


def _suspended_by_shutdown(world: World) -> bool:
    with world.db() as conn:
        return conn.execute("SELECT 1 FROM operations WHERE status = 'Suspended' "
                            "AND reason = 'Shutdown'").fetchone() is not None


def _source_step_names() -> set[str]:
    text = "\n".join(p.read_text() for p in (REPO / "devcell" / "controllers").glob("*.py"))
    return set(re.findall(r'Step\("([a-z-]+)"', text))


ISSUE_FAILPOINTS = {"apply.before-write", "apply.before-commit", "apply.after-commit",
                    "op.before-commit", "recover.before-commit", "daemon.started"}


def test_matrix_inventory(capsys: pytest.CaptureFixture[str]) -> None:
    """Every step boundary and every failpoint of the issue is in the matrix; print the count."""
    covered = {c.point for c in CASES}
    steps = _source_step_names() | {s for s in STEP_METHOD}
    wanted = ISSUE_FAILPOINTS | {p for s in steps for p in _steps(s)}
    missing = sorted(wanted - covered)
    assert not missing, f"failpoints with no crash case: {missing}"
    assert steps <= set(STEP_METHOD), f"steps with no known backend method: {steps - set(STEP_METHOD)}"
    points = Counter((c.mode, c.scenario, c.point) for c in CASES)
    default = sum(1 for c in CASES if c.run == 1)
    with capsys.disabled():
        print(f"\ncrash matrix: {len(points)} points ({len(covered)} distinct failpoints) x runs "
              f"= {len(CASES)} cases ({default} in the default run, all with "
              f"DEVCELL_CRASH_MATRIX=full); inline {sum(c.mode == 'inline' for c in CASES)}, "
              f"daemon {sum(c.mode == 'daemon' for c in CASES)}")


# -- storage: kill -9 inside a checkpoint, a fork's mount, a fork's removal -------------------
# The steps above run on the fake backend; these points lie inside the container backend's
# workspace store (hard-linked checkpoints, overlay forks), so each is driven by a child
# process calling the store directly, killed there, and followed by the same call again (what
# the next reconcile does). Nothing is lost, the retry makes exactly the right tree, no
# temporary, trash directory or mount is left behind.

STORAGE_POINTS = {
    "storage.checkpoint.tree-built": "checkpoint",
    "storage.checkpoint.before-rename": "checkpoint",
    "storage.volume.probe-mounted": "fork",
    "storage.volume.before-mount": "fork",
    "storage.volume.unmounted": "delete-fork",
    "storage.checkpoint.retire": "delete",
}
_STORAGE_CALL = """
import sys
from pathlib import Path
from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import WorkspaceStore
store = WorkspaceStore(Layout(Path(sys.argv[1])))
action = sys.argv[2]
if action == "checkpoint":
    store.checkpoint(checkpoint_id=(sys.argv[3:4] or [""])[0] or "snap_2",
                     cell_id="cell_1", volume_id="vol_1")
elif action == "fork":
    store.create_volume(cell_id="cell_f", cell_name="f", volume_id="vol_f",
                        from_checkpoint="snap_1")
elif action == "delete":
    store.delete_checkpoint(sys.argv[3])
else:
    store.delete_volume("vol_f")
"""


def _killable_script(script: str, *args: str, failpoint: str | None) -> int:
    """Run a storage script in its own process, killed at `failpoint` if one is named."""
    env = {k: v for k, v in os.environ.items() if k != "DEVCELL_FAILPOINT"}
    if failpoint:
        env["DEVCELL_FAILPOINT"] = failpoint
    return subprocess.run([PY, "-c", script, *args], env=env, cwd=REPO, timeout=CMD_TIMEOUT,
                          check=False).returncode


def _storage_call(state: Path, action: str, failpoint: str | None = None,
                  *args: str) -> int:
    return _killable_script(_STORAGE_CALL, str(state), action, *args, failpoint=failpoint)


def _checkpointed_tree(state: Path) -> tuple[WorkspaceStore, Path]:
    """A store whose volume vol_1 (cell_1) holds 200 small files in 7 folders, checkpointed
    as snap_1 once the files are older than the checkpoint's clock tick (so snap_1 may
    share them); returns the store and vol_1's workspace."""
    from devcell.backends.container.layout import Layout
    from devcell.backends.container.workspaces import WorkspaceStore

    store = WorkspaceStore(Layout(state))
    store.create_volume(cell_id="cell_1", cell_name="api", volume_id="vol_1",
                        from_checkpoint=None)
    workspace = store.layout.workspace("vol_1")
    for i in range(200):
        (workspace / f"d{i % 7}").mkdir(exist_ok=True)
        (workspace / f"d{i % 7}" / f"f{i}").write_bytes(os.urandom(32))
    time.sleep(0.05)
    store.checkpoint(checkpoint_id="snap_1", cell_id="cell_1", volume_id="vol_1")
    return store, workspace


def _tree(root: Path) -> dict[str, tuple[int, int, bytes | str | None]]:
    found: dict[str, tuple[int, int, bytes | str | None]] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            st = path.lstat()
            body = (path.read_bytes() if path.is_file() and not path.is_symlink() else
                    os.readlink(path) if path.is_symlink() else None)
            found[str(path.relative_to(root))] = (st.st_mode, st.st_uid, body)
    return found


def _leftovers(state: Path) -> list[str]:
    names = [p.name for parent in (state / "volumes", state / "images" / "checkpoints")
             for p in parent.iterdir() if p.name.startswith(".")]
    with open("/proc/self/mountinfo") as info:
        mounts = [line.split()[4] for line in info if str(state) in line]
    # a fork's overlay and a layer's read-only view are mounts that belong there
    return names + [m for m in mounts if not m.endswith(("vol_f/workspace", "/view"))]


@pytest.mark.e2e
@pytest.mark.parametrize("point", sorted(  # delete's points: test_storage_crash_over_a_shared_tree
    p for p, action in STORAGE_POINTS.items() if action != "delete"))
def test_storage_crash(point: str, tmp_path: Path) -> None:
    from devcell.backends.container import overlay

    action = STORAGE_POINTS[point]
    if action != "checkpoint" and overlay.supported() is not None:
        pytest.skip(f"no overlay mounts here: {overlay.supported()}")
    state = tmp_path / "state"
    store, workspace = _checkpointed_tree(state)
    snap_1 = store.layout.checkpoint("snap_1") / "workspace"
    (workspace / "d0" / "f0").write_bytes(b"changed after snap_1")
    if action == "delete-fork":
        store.create_volume(cell_id="cell_f", cell_name="f", volume_id="vol_f",
                            from_checkpoint="snap_1")
        (store.layout.workspace("vol_f") / "fork-only").write_text("the fork's")
    saved, live = _tree(snap_1), _tree(workspace)

    assert _storage_call(state, action, f"{point}:1") == KILLED
    assert _tree(snap_1) == saved and _tree(workspace) == live, "the crash lost nothing"
    if action == "checkpoint":
        assert store.find_checkpoint("snap_2") is None  # incomplete: never reported
    assert _storage_call(state, action) == 0, "the same call again completes"
    assert _tree(snap_1) == saved and _tree(workspace) == live
    if action == "checkpoint":  # a layer over snap_1 where overlay can read one back
        assert _tree(store.tree_of("snap_2")) == live
        own = store.layout.checkpoint("snap_2") / "workspace"
        if (store.find_checkpoint("snap_2") or {}).get("over") == "snap_1":
            assert not (own / "d1" / "f1").exists() and (own / "d0" / "f0").exists()
        else:
            assert os.stat(own / "d1" / "f1").st_ino == os.stat(snap_1 / "d1" / "f1").st_ino
    elif action == "fork":
        fork = store.layout.workspace("vol_f")
        assert overlay.is_mounted(fork) and _tree(fork) == saved
        store.delete_volume("vol_f")
    else:
        assert not store.layout.volume("vol_f").exists()
    assert _leftovers(state) == []


SHARED_TREE_CASES = [
    ("storage.checkpoint.before-rename", "checkpoint"),  # naming snap_1's tree
    ("storage.checkpoint.retire", "delete snap_1"),  # retired: snap_2 names its tree
    ("storage.checkpoint.retire", "delete snap_2"),  # the last name: the tree must go too
]


@pytest.mark.e2e
@pytest.mark.parametrize(("point", "action"), SHARED_TREE_CASES)
def test_storage_crash_over_a_shared_tree(point: str, action: str, tmp_path: Path) -> None:
    """A checkpoint of an unchanged workspace names the previous tree: a kill while naming
    it, while retiring the tree's own checkpoint, or while removing the last name loses
    nothing still named, and the retry (or any later delete) leaves nothing behind."""
    from devcell.backends.container.workspaces import SAME_AS
    from devcell.reconciler import recovery

    state = tmp_path / "state"
    store, workspace = _checkpointed_tree(state)
    live = _tree(workspace)
    verb, _, target = action.partition(" ")
    if verb == "delete":
        store.checkpoint(checkpoint_id="snap_2", cell_id="cell_1", volume_id="vol_1")
        assert (store.find_checkpoint("snap_2") or {})[SAME_AS] == "snap_1"
        if target == "snap_2":
            store.delete_checkpoint("snap_1")  # retired: snap_2 names its tree

    assert _storage_call(state, verb, f"{point}:1", target) == KILLED
    assert _tree(workspace) == live
    for name in ("snap_1", "snap_2"):
        if store.find_checkpoint(name) is not None:
            assert _tree(store.tree_of(name)) == live, f"{name} lost nothing"
    assert _storage_call(state, verb, None, target) == 0, "the same call again completes"
    if verb == "checkpoint":
        assert (store.find_checkpoint("snap_2") or {})[SAME_AS] == "snap_1"
        assert _tree(store.tree_of("snap_2")) == live
    elif target == "snap_1":
        assert store.find_checkpoint("snap_1") is None
        assert _tree(store.tree_of("snap_2")) == live
    recovery.remove_dead_temporaries(state)  # what every converge does first
    assert _leftovers(state) == []
    for name in ("snap_1", "snap_2"):
        store.delete_checkpoint(name)
    assert os.listdir(store.layout.checkpoints) == [], "nothing left once both are deleted"


LAYER_CASES = [
    ("storage.checkpoint.tree-built", "checkpoint snap_3"),  # a second layer over snap_1
    ("storage.checkpoint.before-rename", "checkpoint snap_3"),
    ("storage.checkpoint.retire", "delete snap_1"),  # retired: the layer snap_2 stands on it
    ("storage.checkpoint.retire", "delete snap_2"),  # the last layer: snap_1's tree goes too
]


@pytest.mark.e2e
@pytest.mark.parametrize(("point", "action"), LAYER_CASES)
def test_storage_crash_under_a_layer(point: str, action: str, tmp_path: Path) -> None:
    """snap_2 holds only what changed since snap_1 (a layer over its tree): a kill while a
    layer is made, while snap_1 is retired under it, or while the last layer over a retired
    snap_1 is removed loses nothing still named, and the retry leaves nothing behind."""
    from devcell.backends.container import overlay
    from devcell.reconciler import recovery

    if overlay.supported() is not None:
        pytest.skip(f"no overlay mounts here: {overlay.supported()}")
    state = tmp_path / "state"
    store, workspace = _checkpointed_tree(state)
    (workspace / "d0" / "f0").write_bytes(b"changed after snap_1")
    time.sleep(0.05)
    store.checkpoint(checkpoint_id="snap_2", cell_id="cell_1", volume_id="vol_1")
    assert (store.find_checkpoint("snap_2") or {}).get("over") == "snap_1"
    saved = {"snap_1": _tree(store.tree_of("snap_1")), "snap_2": _tree(store.tree_of("snap_2"))}
    verb, _, target = action.partition(" ")
    if verb == "checkpoint":
        (workspace / "d1" / "f1").write_bytes(b"changed after snap_2")
        time.sleep(0.05)
    elif target == "snap_2":
        store.delete_checkpoint("snap_1")  # retired: the layer stands on it
    live = _tree(workspace)

    assert _storage_call(state, verb, f"{point}:1", target) == KILLED
    assert _tree(workspace) == live
    for name in ("snap_1", "snap_2"):
        if store.find_checkpoint(name) is not None:
            assert _tree(store.tree_of(name)) == saved[name], f"{name} lost nothing"
    assert _storage_call(state, verb, None, target) == 0, "the same call again completes"
    if verb == "checkpoint":
        assert (store.find_checkpoint("snap_3") or {}).get("over") == "snap_1"
        assert _tree(store.tree_of("snap_3")) == live
    elif target == "snap_1":
        assert store.find_checkpoint("snap_1") is None
        assert _tree(store.tree_of("snap_2")) == saved["snap_2"]
    recovery.remove_dead_temporaries(state)  # what every converge does first
    assert _leftovers(state) == []
    for name in ("snap_1", "snap_2", "snap_3"):
        store.delete_checkpoint(name)
    assert os.listdir(store.layout.checkpoints) == [], "nothing left once all are deleted"
    with open("/proc/self/mountinfo") as info:
        assert not [line for line in info if str(state) in line], "no view left mounted"


def test_every_storage_failpoint_is_crashed() -> None:
    named = set()
    for source in (REPO / "devcell" / "backends").rglob("*.py"):
        named |= set(re.findall(r'failpoints\.hit\("(storage\.[a-z.-]+)"\)', source.read_text()))
    crashed = set(STORAGE_POINTS) | set(RESTORE_POINTS)
    assert named == crashed, f"storage failpoints with no crash case: {named - crashed}"


# -- restore in place: kill -9 while the restored tree is built and right after the swap -----

RESTORE_POINTS = ("storage.restore.tree-built", "storage.restore.exchanged")
_RESTORE_CALL = """
import sys
from pathlib import Path
from devcell.backends.container import workspace_restore
from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import WorkspaceStore
store = WorkspaceStore(Layout(Path(sys.argv[1])))
workspace_restore.restore(store, sys.argv[2], sys.argv[3])
"""


def _restore_call(state: Path, volume: str, checkpoint: str, failpoint: str | None = None
                  ) -> int:
    return _killable_script(_RESTORE_CALL, str(state), volume, checkpoint, failpoint=failpoint)


@pytest.mark.e2e
@pytest.mark.parametrize("storage", ["copy", "fork"])
@pytest.mark.parametrize("point", RESTORE_POINTS)
def test_restore_crash(point: str, storage: str, tmp_path: Path) -> None:
    """Killed at either point, the workspace is the whole old tree or the whole restored one
    (never a mix), no checkpoint changed; the same call again restores exactly, and nothing
    (temporary, trash, mount) is left behind."""
    from devcell.backends.container import overlay

    if storage == "fork" and overlay.supported() is not None:
        pytest.skip(f"no overlay mounts here: {overlay.supported()}")
    state = tmp_path / "state"
    store, workspace = _checkpointed_tree(state)
    volume, target = "vol_1", "snap_1"
    if storage == "fork":
        store.create_volume(cell_id="cell_f", cell_name="f", volume_id="vol_f",
                            from_checkpoint="snap_1")
        volume, workspace = "vol_f", store.layout.workspace("vol_f")
        (workspace / "d0" / "f0").write_bytes(b"the fork's own")
        store.checkpoint(checkpoint_id="snap_f", cell_id="cell_f", volume_id="vol_f")
        target = "snap_f"
    (workspace / "d1" / "f1").write_bytes(b"changed after the snapshot")
    shutil.rmtree(workspace / "d2")
    (workspace / "new").write_text("added after the snapshot")
    saved = {c: _tree(store.layout.checkpoint(c) / "workspace") for c in ("snap_1", target)}
    live, wanted = _tree(workspace), saved[target]
    assert live != wanted
    try:
        assert _restore_call(state, volume, target, f"{point}:1") == KILLED
        store.ensure_mounted(volume)  # what the next reconcile does first
        after = _tree(workspace)
        assert after == (live if point.endswith("tree-built") else wanted), "old or new, whole"
        assert {c: _tree(store.layout.checkpoint(c) / "workspace") for c in saved} == saved
        assert _restore_call(state, volume, target) == 0, "the same call again completes"
        assert _tree(workspace) == wanted
        assert {c: _tree(store.layout.checkpoint(c) / "workspace") for c in saved} == saved
        assert _leftovers(state) == []
    finally:
        if storage == "fork":
            store.delete_volume("vol_f")


# -- garbage collection ------------------------------------------------------------------------

GC_POINTS = ([(p, 1) for p in ("gc.planned", "op.before-commit", "recover.before-commit")]
             + [(p, 3) for p in _steps("delete-checkpoint")]
             + [(p, 2) for p in _steps("delete-volume")] + [(p, 1) for p in _steps("delete")])
"""Where `devcell gc` is killed, with how many times it passes there (one per leftover of
that kind): the default run kills at the first pass, the full run at each."""


def _gc_world(root: Path) -> tuple[World, dict[str, str], set[str]]:
    """Cells a, b, c with snapshots s1-s3; c and s2 deleted; then what crashes left behind:
    s2's checkpoint, c's runtime, volume and sleep checkpoint, and empty orphans no object
    ever named. Returns the world, the live ids that must survive, and the leaked ids."""
    manifests = write_manifests(root)
    world = World(root, manifests)
    world.apply(manifests / "cells")
    world.apply(manifests / "snaps")
    gone = root / "gone"
    gone.mkdir()
    (gone / "c.yaml").write_text(cell_doc("c"))
    (gone / "s2.yaml").write_text(snap_doc("s2", "b"))
    world.delete(gone)
    with world.db() as conn:
        ids = {r[0]: r[1] for r in conn.execute(
            "SELECT name, id FROM cells UNION ALL SELECT name, id FROM snapshots")}
        live = {r[0] for r in conn.execute(
            "SELECT id FROM cells WHERE deleted_at IS NULL UNION SELECT id FROM snapshots "
            "WHERE deleted_at IS NULL UNION SELECT id FROM volumes WHERE deleted_at IS NULL")}
    leaks = {"checkpoints": [ids["s2"], f"sleep-{ids['c']}-g1", "snap_orphanempty00000001"],
             "volumes": ["vol_ofdeletedcellc000001", "vol_orphanempty000000001"],
             "cells": [ids["c"]]}
    owners = {f"sleep-{ids['c']}-g1": ids["c"], ids["s2"]: ids["b"],
              "vol_ofdeletedcellc000001": ids["c"]}
    conn = sqlite3.connect(world.state / "backends" / "fake.db", isolation_level=None)
    try:
        for table, rows in leaks.items():
            for rid in rows:
                if table == "cells":
                    conn.execute("INSERT INTO cells (id, name, state) VALUES (?, ?, 'running')",
                                 (rid, rid))
                else:
                    conn.execute(f"INSERT INTO {table} (id, cell_id) VALUES (?, ?)",
                                 (rid, owners.get(rid, "cell_neverrecorded000001")))
    finally:
        conn.close()
    return world, live, {rid for rows in leaks.values() for rid in rows}


def _held(world: World) -> set[str]:
    with world.fake() as fake:
        return {r[0] for r in fake.execute(
            "SELECT id FROM cells UNION SELECT id FROM volumes UNION SELECT id FROM checkpoints")}


def _gc_calls(world: World) -> Counter[str]:
    with world.fake() as fake:
        return Counter(r[0] for r in fake.execute(
            "SELECT target FROM calls WHERE outcome = 'ok' AND method IN "
            "('delete', 'delete_volume', 'delete_checkpoint')"))


@pytest.fixture(scope="module")
def gc_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[World, set[str], set[str]]:
    return _gc_world(tmp_path_factory.mktemp("gc"))


@pytest.mark.e2e
@pytest.mark.parametrize("point", [pytest.param(f"{p}:{n}", id=f"{p}:{n}")
                                   for p, passes in GC_POINTS
                                   for n in range(1, (passes if FULL else 1) + 1)])
def test_gc_crash(point: str, gc_template: tuple[World, set[str], set[str]],
                  tmp_path: Path) -> None:
    """kill -9 inside `devcell gc` (or, for recover.before-commit, inside the recovery of the
    gc after it): nothing still referenced is lost, the operation in flight is failed as
    Interrupted, and the next gc reclaims every leftover with each removal made once."""
    template, live, leaked = gc_template
    world = template.clone(tmp_path)
    before_calls = _gc_calls(world)
    if point.startswith("recover."):
        first = world.run("gc", failpoint="step.delete-volume.after-call:1")
        assert first.returncode == KILLED, world.transcript()
    before = world.running_ops()
    proc = world.run("gc", failpoint=point)
    assert proc.returncode == KILLED, f"expected SIGKILL at {point}\n{world.transcript()}"
    crash = Crash(point, {op: step for op, step in world.running_ops().items()
                          if op not in before})
    if point.startswith("step."):
        assert list(crash.running.values()) == [point.split(".")[1]], crash.running
    elif point.startswith("op."):
        assert len(crash.running) == 1, crash.running
    world.crashes.append(crash)
    held = _held(world)
    assert live <= held | _db_only(world), f"{point}: a referenced resource was removed"
    world.ok("gc")
    assert _held(world).isdisjoint(leaked), f"leftovers after the next gc: {_held(world) & leaked}"
    calls = _gc_calls(world)
    calls.subtract(before_calls)
    assert {rid: calls[rid] for rid in leaked} == dict.fromkeys(leaked, 1), (
        f"each leftover removed exactly once: {dict(calls)}\n{world.transcript()}")
    world.check_integrity()
    world.check_interrupted()
    world.check_accounting()
    world.check_converged()
    assert world.ok("gc").stdout.startswith("freed 0 B")  # nothing left to collect


def _db_only(world: World) -> set[str]:
    """Live ids with nothing in the fake backend (a snapshot's id is its checkpoint's)."""
    with world.db() as conn:
        return {r[0] for r in conn.execute("SELECT id FROM cells WHERE deleted_at IS NULL "
                                           "AND desired_state = 'Sleeping'")}
