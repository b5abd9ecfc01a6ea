"""kill -9 of DevCell at crash points of a vm cell's sleep, start, machine snapshot and fork,
through the CLI as a user runs it, on real QEMU (TCG here).

Each case runs one command with `DEVCELL_FAILPOINT` (it must die there, SIGKILL), then the
same command again, which must succeed; then: nothing lost (the counter process goes on from
its value, files and processes the snapshot held are in the fork), nothing replayed (a saved
machine or a snapshot's files are the ones the killed run wrote, a resumed machine is not
resumed again: same QEMU pid), no operation left Running, and every QEMU of the state
directory belongs to a live cell that should run, one each (none that nothing owns). One
parent machine boots once for the whole sequence, so the run stays short.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import yaml

from devcell.backends.vm import memory as vm_memory
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.layout import VmLayout
from tests.backends.engine import IMAGE
from tests.backends.vm.conftest import COUNTER, make_state
from tests.backends.vm_machines import kill_machines
from tests.conftest import Cli

KILLED = -signal.SIGKILL
SLOW = 600


def _cell(path: Path, name: str, fork_of: str | None = None) -> Path:
    workspace: dict[str, Any] = {"mountPath": "/workspace"}
    if fork_of:
        workspace["from"] = {"snapshot": fork_of}
    path.write_text(yaml.safe_dump({
        "apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": name},
        "spec": {"backend": "vm", "image": IMAGE, "network": {"mode": "none"},
                 "resources": {"memory": "128Mi"}, "workspace": workspace,
                 "services": [{"name": "counter", "command": ["sh", "-c", COUNTER]}]}}))
    return path


def _snapshot(path: Path, name: str) -> Path:
    path.write_text(f"apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: {{name: "
                    f"{name}}}\nspec: {{cell: crashbox, consistency: machine}}\n")
    return path


def _crash_then_again(cli: Cli, failpoint: str, *args: str) -> None:
    killed = cli(*args, env={"DEVCELL_FAILPOINT": failpoint}, timeout=SLOW)
    assert killed.returncode == KILLED, (failpoint, killed.returncode, killed.stderr[-2000:])
    again = cli(*args, timeout=SLOW)
    assert again.returncode == 0, (failpoint, again.stdout[-2000:], again.stderr[-2000:])


def _exec(cli: Cli, cell: str, script: str) -> str:
    done = cli("exec", cell, "--", "sh", "-c", script, timeout=SLOW)
    assert done.returncode == 0, (cell, script, done.stderr)
    return done.stdout


def _db(state: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)


def _cells(state: Path) -> dict[str, dict[str, Any]]:
    with _db(state) as conn:
        rows = conn.execute("SELECT id, name, spec, phase, held FROM cells "
                            "WHERE deleted_at IS NULL").fetchall()
    # What the cell should be: a runtime hold (`cell sleep`, store/holds.py) wins over the
    # spec's state, which a sleep no longer rewrites.
    return {row[0]: {"name": row[1], "spec": json.loads(row[2]), "phase": row[3],
                     "want": (json.loads(row[4]) if row[4] else {}).get(
                         "state", json.loads(row[2]).get("state", "Running"))}
            for row in rows}


def _pid(state: Path, name: str) -> int:
    layout = VmLayout(state)
    ids = [cell_id for cell_id, cell in _cells(state).items() if cell["name"] == name]
    assert len(ids) == 1, ids
    pid = vm_proc.find(layout.cell(ids[0]), layout.machine_name(ids[0]))
    assert pid is not None, name
    return pid


def _check(state: Path) -> None:
    with _db(state) as conn:
        running = conn.execute("SELECT id FROM operations WHERE status = 'Running'").fetchall()
    assert not running, running
    cells = _cells(state)
    machines = vm_proc.scan(VmLayout(state).name_prefix)
    owners = {name.removeprefix(VmLayout(state).name_prefix) for name in machines}
    assert owners <= set(cells), f"QEMU that no live cell owns: {owners - set(cells)}"
    should_run = {cell_id for cell_id, cell in cells.items() if cell["want"] == "Running"}
    assert owners == should_run, (owners, should_run)
    for cell in cells.values():
        assert cell["phase"] == cell["want"], cell


def _counter(cli: Cli, cell: str) -> int:
    return int(_exec(cli, cell, "cat /tmp/counter"))


def _mtime(path: Path) -> int:
    return path.stat().st_mtime_ns


def test_kill_9_over_sleep_start_machine_snapshot_and_fork(
        cli: Cli, tmp_path: Path, state_dir: Path, vm_cache: Path) -> None:
    make_state(state_dir, vm_cache)
    layout = VmLayout(state_dir)
    try:
        parent = _cell(tmp_path / "parent.yaml", "crashbox")
        assert cli("apply", "-f", str(parent), timeout=SLOW).returncode == 0
        _exec(cli, "crashbox", "echo kept > /workspace/kept; "
                               "sleep 900 </dev/null >/dev/null 2>&1 & echo $! > /tmp/sleeper")

        # -- sleep: killed with the machine paused mid-save, then after its save ------------
        before = _counter(cli, "crashbox")
        _crash_then_again(cli, "vm.save.after-migrate", "cell", "sleep", "crashbox")
        _check(state_dir)
        _crash_then_again(cli, "step.restore-machine.after-call", "cell", "start", "crashbox")
        _check(state_dir)
        woken = _pid(state_dir, "crashbox")
        after = _counter(cli, "crashbox")
        assert before <= after < before + 120, (before, after)

        before = _counter(cli, "crashbox")
        _crash_then_again(cli, "step.save-machine.after-call", "cell", "sleep", "crashbox")
        _check(state_dir)
        (saved,) = [p for p in layout.checkpoints.iterdir() if p.name.startswith("sleep-")]
        assert json.loads((saved / "memory.json").read_text())["memory_in_file"] is True
        # -- start: killed before the restore's call, then again ------------------------------
        _crash_then_again(cli, "step.restore-machine.before-call", "cell", "start", "crashbox")
        _check(state_dir)
        assert _pid(state_dir, "crashbox") != woken
        after = _counter(cli, "crashbox")
        assert before <= after < before + 120, (before, after)
        assert _exec(cli, "crashbox", "kill -0 $(cat /tmp/sleeper) && cat /workspace/kept") \
            == "kept\n"

        # -- machine snapshot: killed paused after the disk switch (before the memory), after
        # the memory, then after the step ---------------------------------------------------
        _crash_then_again(cli, "vm.snapshot.after-disk", "apply", "-f",
                          str(_snapshot(tmp_path / "s0.yaml", "mem0")))
        _check(state_dir)
        _crash_then_again(cli, "vm.snapshot.after-memory", "apply", "-f",
                          str(_snapshot(tmp_path / "s1.yaml", "mem1")))
        _check(state_dir)
        assert _counter(cli, "crashbox") >= after  # running on, not left paused
        _crash_then_again(cli, "step.snapshot-machine.after-call", "apply", "-f",
                          str(_snapshot(tmp_path / "s2.yaml", "mem2")))
        _check(state_dir)
        listed = json.loads(cli("get", "snapshots", "-o", "json").stdout)
        items = listed["items"] if isinstance(listed, dict) else listed
        assert {s["metadata"]["name"]: s["status"]["consistency"] for s in items} == \
            {"mem0": "machine", "mem1": "machine", "mem2": "machine"}
        parts = sorted(p for p in (layout.root / "machines").iterdir()
                       if not p.name.startswith("."))
        assert len(parts) == 3 and all((p / vm_memory.MARKER).is_file() for p in parts)

        # -- fork: killed after the resume before its identity, then after its start --------
        _crash_then_again(cli, "vm.fork.after-resume", "apply", "-f",
                          str(_cell(tmp_path / "f1.yaml", "fork-one", fork_of="mem1")))
        _check(state_dir)
        _crash_then_again(cli, "step.start.after-call", "apply", "-f",
                          str(_cell(tmp_path / "f2.yaml", "fork-two", fork_of="mem2")))
        _check(state_dir)
        ids = set()
        for fork in ("fork-one", "fork-two"):
            pid = _pid(state_dir, fork)
            out = _exec(cli, fork, "hostname; cat /etc/machine-id; kill -0 $(cat /tmp/sleeper) "
                                   "&& cat /workspace/kept")
            host, machine_id, kept = out.splitlines()
            assert (host, kept) == (fork, "kept")
            ids.add(machine_id)
            assert _pid(state_dir, fork) == pid  # resumed once
        assert len(ids) == 2
    finally:
        kill_machines(state_dir)
