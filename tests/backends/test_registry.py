"""The backend registry (devcell/backend_registry.py) is the one place DevCell learns about a
backend: every entry's holdings are found with no record naming them.

For every backend in the registry, a real cell (and a snapshot) is made through the CLI, then
`state.db` is moved away: every command of the command table that reads the state refuses to
start afresh, naming what it found, and changes nothing; moving `state.db` back brings every
object back. And a vm machine no record names is found by the daemon's orphan sweep and kept,
running, with an `OrphanKept` event, never ended or deleted.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell import backend_registry
from devcell.cli import commands
from tests.backends.archive_support import craft
from tests.backends.engine import IMAGE, remove_containers, require_engine
from tests.conftest import REPO, Cli

STATELESS = {
    ("schema",): "prints a schema",
    ("explain",): "prints a schema's documentation",
    ("version",): "reports this machine's backends",
    ("completion",): "prints a shell script",
    ("import", "devcontainer"): "converts a file to a manifest",
    ("image", "build-base"): "builds an image for the engine; reads no record",
    ("context", "list"): "reads the contexts file, not the state directory",
    ("context", "use"): "writes the contexts file, not the state directory",
    ("context", "set"): "writes the contexts file, not the state directory",
    ("context", "delete"): "writes the contexts file, not the state directory",
}
"""Commands that read no record of the state directory (nothing to start afresh over)."""


def _command_lines(work: Path) -> dict[tuple[str, ...], list[str]]:
    """One command line per command of the table that reads the state directory."""
    manifest, archive = str(work / "walk.yaml"), str(work / "walk.tar")
    return {
        ("apply",): ["apply", "-f", manifest], ("get",): ["get", "cells"],
        ("describe",): ["describe", "cell", "walk"], ("delete",): ["delete", "cell", "walk"],
        ("diff",): ["diff", "-f", manifest],
        ("snapshot", "create"): ["snapshot", "create", "walk", "--name", "s2"],
        ("snapshot", "export"): ["snapshot", "export", "s1", "-o", str(work / "out.tar")],
        ("snapshot", "import"): ["snapshot", "import", archive],
        ("snapshot", "restore"): ["snapshot", "restore", "s1"],
        ("snapshot", "list"): ["snapshot", "list", "walk"],
        ("cell", "fork"): ["cell", "fork", "walk", "--snapshot", "s1", "--name", "walk2"],
        ("cell", "sleep"): ["cell", "sleep", "walk"], ("cell", "start"): ["cell", "start", "walk"],
        ("cell", "restart"): ["cell", "restart", "walk"],
        ("cell", "rerun-hooks"): ["cell", "rerun-hooks", "walk"],
        ("wait",): ["wait", "cell", "walk", "--timeout", "5s"],
        ("controller", "run"): ["controller", "run", "--manifests", str(work)],
        ("op", "resume"): ["op", "resume", "op_1"], ("op", "cancel"): ["op", "cancel", "op_1"],
        ("image", "ls"): ["image", "ls"], ("image", "prune"): ["image", "prune"],
        ("gc",): ["gc"], ("df",): ["df"],
        ("exec",): ["exec", "walk", "--", "true"], ("logs",): ["logs", "walk"],
        ("port-forward",): ["port-forward", "walk", "8080"],
        ("ssh",): ["ssh", "walk", "--", "true"], ("ssh-config",): ["ssh-config"],
        ("ssh-proxy",): ["ssh-proxy", "walk"], ("code",): ["code", "walk", "--print"],
        ("snapshot", "push"): ["snapshot", "push", "s1", "127.0.0.1:9/walk:s1"],
        ("snapshot", "pull"): ["snapshot", "pull", "127.0.0.1:9/walk:s1"],
        ("node", "cordon"): ["node", "cordon", "n1"],
        ("node", "uncordon"): ["node", "uncordon", "n1"],
        ("node", "drain"): ["node", "drain", "n1"],
        ("token", "create"): ["token", "create", "--user", "walk", "--role", "viewer"],
        ("token", "list"): ["token", "list"], ("token", "revoke"): ["token", "revoke", "tok_1"],
    }


def test_every_command_is_walked_or_named_stateless(tmp_path: Path) -> None:
    """A command added to the table must be walked here or said to read no state."""
    table = {entry.words for entry in commands.TABLE}
    assert set(_command_lines(tmp_path)) | set(STATELESS) == table
    assert not set(_command_lines(tmp_path)) & set(STATELESS)


def _manifest(backend: str) -> str:
    spec = {"fake": "backend: fake",
            "container": f"backend: container\n  image: {IMAGE}\n  network: {{mode: none}}",
            "vm": f"backend: vm\n  image: {IMAGE}\n  network: {{mode: none}}\n"
                  "  resources: {memory: 128Mi}"}[backend]
    return textwrap.dedent("""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {name: walk}
        spec:
          workspace: {mountPath: /workspace}
          SPEC
        """).replace("SPEC", spec)


@contextlib.contextmanager
def _runtime(backend: str, state: Path, vm_cache: Path) -> Iterator[None]:
    """What the backend's real runtime needs, and every runtime under `state` ended after."""
    if backend == "fake":
        yield
        return
    if backend == "container":
        require_engine()
        try:
            yield
        finally:
            remove_containers(state)
        return
    from tests.backends.vm.conftest import make_state
    from tests.backends.vm_machines import kill_machines

    make_state(state, vm_cache)
    try:
        yield
    finally:
        kill_machines(state)


@pytest.fixture(scope="module")
def vm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vm-images")


def _run(state: Path, argv: list[str]) -> tuple[int, str]:
    """`devcell ARGV` in this process (fast: twenty-odd commands per backend)."""
    from devcell.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["--state-dir", str(state), *argv])
    return code, err.getvalue()


def _tree(state: Path) -> list[str]:
    """Every path under `state` with its size (directories: 0), links not followed."""
    out = []
    for root, dirs, files in os.walk(state):
        for name in sorted(dirs + files):
            path = Path(root, name)
            size = path.lstat().st_size if path.is_file() and not path.is_symlink() else 0
            if name.endswith(".qcow2"):
                size = 0  # a running guest's disk grows as it writes: not the command's doing
            out.append(f"{path.relative_to(state)} {size}")
    return sorted(out)


DATABASE = ("state.db", "state.db-wal", "state.db-shm")


@pytest.mark.parametrize("backend", backend_registry.names())
def test_a_lost_database_is_never_taken_for_a_fresh_install(
        backend: str, cli: Cli, state_dir: Path, tmp_path: Path, vm_cache: Path) -> None:
    entry = backend_registry.get(backend)
    assert entry is not None
    work = tmp_path / "work"
    work.mkdir()
    (work / "walk.yaml").write_text(_manifest(backend))
    (work / "walk.tar").write_bytes(craft([]))
    with _runtime(backend, state_dir, vm_cache):
        applied = cli("apply", "-f", str(work / "walk.yaml"), timeout=600)
        assert applied.returncode == 0, applied.stderr
        snapped = cli("snapshot", "create", "walk", "--name", "s1", timeout=600)
        assert snapped.returncode == 0, snapped.stderr
        held = backend_registry.held(state_dir, (r for r in entry.roots if r.guarded))
        assert held, f"the {backend} backend's cell left nothing in its registry roots"

        aside = tmp_path / "aside"
        aside.mkdir()
        for name in DATABASE:
            if (state_dir / name).exists():
                shutil.move(state_dir / name, aside / name)
        before = _tree(state_dir)
        for words, argv in _command_lines(work).items():
            if words == ("controller", "run"):
                proc = subprocess.run(
                    [sys.executable, "-m", "devcell", "--state-dir", str(state_dir), *argv],
                    capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
                code, err = proc.returncode, proc.stderr
            else:
                code, err = _run(state_dir, argv)
            assert code != 0, (words, err)
            assert "state.db is missing" in err and "Traceback" not in err, (words, err)
            for found in held:  # e.g. "vm/cells/ (1 entry)": each named
                assert found in err, (words, found, err)
        assert not (state_dir / "state.db").exists()
        assert _tree(state_dir) == before, "a refused command changed the state directory"

        for name in DATABASE:
            if (aside / name).exists():
                shutil.move(aside / name, state_dir / name)
        got = cli("get", "cells", "walk", "-o", "json")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["status"]["phase"] == "Running"
        snaps = cli("get", "snapshots", "-o", "name")
        assert snaps.stdout.split() == ["snapshot/s1"], snaps
        used = cli("df", "-o", "json")
        assert used.returncode == 0, used.stderr
        deleted = cli("delete", "cell", "walk", "--approve", timeout=600)
        assert deleted.returncode == 0, deleted.stderr


def _events(cli: Cli) -> list[dict[str, str]]:
    got = cli("get", "events", "-o", "json")
    assert got.returncode == 0, got.stderr
    items: list[dict[str, str]] = json.loads(got.stdout)["items"]
    return items


def test_an_unrecorded_vm_machine_is_found_by_the_sweep_and_kept(
        cli: Cli, state_dir: Path, tmp_path: Path, vm_cache: Path) -> None:
    """A QEMU machine of this state directory that no record names (a database restored from
    an old backup; a crash before the commit) in a state directory whose database names no vm
    cell: the daemon's sweep finds the vm backend by its storage roots and keeps the machine
    running, its directory and its disk, recording OrphanKept; `gc` keeps it without
    approval; `df` counts it."""
    from devcell.backends.base import CellRef
    from devcell.backends.vm import proc as vm_proc
    from devcell.backends.vm.backend import VmBackend
    from tests.backends.vm.conftest import make_state
    from tests.backends.vm_machines import kill_machines

    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "other.yaml").write_text(_manifest("fake").replace("walk", "other"))
    make_state(state_dir, vm_cache)
    applied = cli("apply", "-f", str(manifests))  # a database that names no vm cell
    assert applied.returncode == 0, applied.stderr
    ref = CellRef("cell_unrecorded01", "lost", {"backend": "vm", "image": IMAGE,
                                                 "network": {"mode": "none"},
                                                 "workspace": {"mountPath": "/workspace"},
                                                 "resources": {"memory": 128 << 20}},
                  "vol_unrecorded01")
    backend = VmBackend(state_dir=state_dir)
    daemon: subprocess.Popen[str] | None = None
    try:
        backend.create_volume(ref, "vol_unrecorded01", from_checkpoint=None)
        backend.create(ref, "hash-1")
        backend.start(ref)
        pid = vm_proc.scan(backend.layout.name_prefix)[backend.layout.machine_name(ref.id)]
        daemon = subprocess.Popen(
            [sys.executable, "-m", "devcell", "--state-dir", str(state_dir), "controller", "run",
             "--manifests", str(manifests)], cwd=REPO, text=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        kept: list[dict[str, str]] = []
        while not kept and time.monotonic() < deadline and daemon.poll() is None:
            time.sleep(0.5)
            if (state_dir / "state.db").exists():
                kept = [e for e in _events(cli) if e.get("reason") == "OrphanKept"]
        assert daemon.poll() is None, daemon.communicate()[1]
        messages = [e["message"] for e in kept]
        cell_kept = [m for m in messages if f"vm cell {ref.id}" in m]
        assert cell_kept, messages
        assert f"QEMU pid {pid}" in cell_kept[0], cell_kept
        assert str(backend.layout.cell(ref.id)) in cell_kept[0], cell_kept
        assert any("vm volume vol_unrecorded01" in m for m in messages), messages
        removed = [e for e in _events(cli) if e.get("reason") == "OrphanRemoved"]
        assert not removed, removed
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        daemon = None

        assert vm_proc.scan(backend.layout.name_prefix).get(
            backend.layout.machine_name(ref.id)) == pid, "the sweep ended the machine"
        assert backend.layout.cell(ref.id).is_dir() and backend.layout.volume(
            "vol_unrecorded01").is_dir()
        collected = cli("gc", timeout=300)
        assert ref.id in collected.stdout and "--approve" in collected.stdout, collected
        assert vm_proc.scan(backend.layout.name_prefix).get(
            backend.layout.machine_name(ref.id)) == pid, "gc without approval ended it"
        used = cli("df", "-o", "json")
        assert used.returncode == 0, used.stderr
        workspaces = next(t for t in json.loads(used.stdout)["types"]
                          if t["type"] == "Workspaces")
        assert workspaces["reclaimableBytes"] > 0, workspaces  # the vm disk, no record's
    finally:
        if daemon is not None:
            daemon.kill()
            daemon.wait()
        backend.close()
        kill_machines(state_dir)



def test_a_root_behind_a_link_or_unreadable_is_held_not_taken_for_empty(tmp_path: Path) -> None:
    """A root moved elsewhere and linked back (a user's disk layout, or a hostile one) was
    skipped by the guard: `get cells` said "No resources found" and the sweep then removed
    through the link what the records it had lost named. A loop of links was a traceback."""
    state = tmp_path / "state"
    state.mkdir()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "cells" / "cell_x").mkdir(parents=True)
    (state / "vm").mkdir()
    (state / "vm" / "cells").symlink_to(elsewhere / "cells")
    (state / "backends").mkdir()
    (tmp_path / "fake.db").write_bytes(b"SQLite format 3\0" + b"\0" * 100)
    (state / "backends" / "fake.db").symlink_to(tmp_path / "fake.db")
    (state / "volumes").symlink_to("volumes")  # a loop: ELOOP
    code, err = _run(state, ["get", "cells"])
    assert code == 1 and "vm/cells/ (1 entry)" in err and "backends/fake.db" in err, err
    assert "volumes (unreadable: Too many levels of symbolic links)" in err, err
    assert "Traceback" not in err and not (state / "state.db").exists()
