"""Workspace operations of cells on the session's test swarm, carried out on the node that
holds the workspace by jobs there (docs/cluster.md): a snapshot (the cell frozen through its
cgroup on its node, the workspace copied into a checkpoint volume there), a fork of it (its
workspace filled from that volume on the same node, the fork pinned there), a restore (the
changes listed on the node for the approval gate, a new volume filled there and swapped in),
a cordoned node's refusal, gc of an orphan checkpoint (only with approval), the snapshot's
deletion (the checkpoint's tree removed on its node); and a sleep and start (the
checkpoint on the node, the service removed, the workspace kept there). The workspace is
hostile: a link to /etc/passwd, a fifo, a 100 GiB sparse file, a /dev/zero device node and a
setuid file, each copied as what it is (a copy that followed, opened or read any of them
would hang, fill the disk or copy the host's file).

Cost (measured at load ~3-6 on 2 cores): ~37 s for the module with the swarm's start and
stop (~5 s and ~2 s, once per session): the cell's apply and the snapshot ~2 s (three jobs:
freeze, copy, thaw, ~0.5 s each), the fork ~2.5 s (the fill job and the service), the
restore ~8-10 s (its gate's diff, the stop, the safety copy, the fill, the start), the
cordoned node ~1 s, the gc ~1.5 s, the deletes ~3 s, the sleep and start ~9 s (most of
it the engine stopping the sleeping cell's task); then the drains (each test says its cost),
the one through the API ~7-8 s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.backends.container.test_swarm_cells import cells, cli, configure, container_on
from tests.registry import Registry, registry
from tests.swarm import Node, Swarm, all_ready, reset_nodes

__all__ = ["registry"]  # a fixture

IMAGE = "devcell/busybox:latest"
SPARSE = 100 << 30
WRITE = ("cd /workspace; [ -e a ] || { echo hello > a; mkdir d; echo deep > d/b;"
         " ln -s /etc/passwd pw; mkfifo fifo; truncate -s " + str(SPARSE) + " sparse;"
         " echo end >> sparse; cp /bin/busybox suid; chmod 4755 suid; }; exec sleep 100000")


@dataclass
class Taken:
    swarm: Swarm
    state: Path
    node: Node
    container: str
    seconds: float


def manifest(name: str) -> str:
    return (f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata:\n  name: {name}\nspec:\n"
            f"  backend: container\n  image: {IMAGE}\n"
            f"  resources: {{memory: 32Mi, cpus: 0.05}}\n"
            f"  services:\n    - name: boot\n      command: [sh, -c, {json.dumps(WRITE)}]\n")


def _volume(node: Node, label: str) -> str:
    found = node.docker("volume", "ls", "-q", "--filter", f"label={label}").stdout.decode().split()
    assert len(found) == 1, (label, found)
    return found[0]


def _look(node: Node, volume: str, script: str) -> str:
    """`script` run on the node's engine with `volume` at /v (read-only): how the test sees
    what the node holds (DevCell itself never reads a node's disk)."""
    return node.docker("run", "--rm", "--network", "none", "-v", f"{volume}:/v:ro", IMAGE,
                       "sh", "-c", script).stdout.decode()


HOSTILE = ("cd {root}; cat a d/b; readlink pw; stat -c '%F %s %b' fifo sparse;"
           " tail -c 4 sparse; stat -c '%F %t:%T' zero; stat -c '%a %s' suid;"
           " stat -c '%a %u:%g' closed closed/f; cat closed/f")


def _expected(blocks: str) -> str:
    return (f"hello\ndeep\n/etc/passwd\nfifo 0 0\nregular file {SPARSE + 4} {blocks}\nend\n"
            "character special file 1:5\n4755 " f"{Path('/bin/busybox').stat().st_size}\n"
            "2700 1234:1234\n400 1234:1234\nmine\n")


@pytest.fixture(scope="module")
def taken(swarm: Swarm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Taken]:
    state = tmp_path_factory.mktemp("swarm-workspaces") / "state"
    configure(state, swarm.manager.host)
    swarm.wait(lambda: all_ready(swarm), "every node Ready", timeout=90)  # a restarted one
    reset_nodes(swarm)
    try:
        path = state.parent / "src.yaml"
        path.write_text(manifest("src"))
        code, _, err = cli(state, "apply", "-f", str(path))
        assert code == 0, err
        node = next(n for n in swarm.nodes if n.node_id == cells_node(state, "src"))
        container = container_on(node, "src")
        swarm.wait(lambda: node.docker("exec", container, "stat", "/workspace/suid",
                                       check=False).returncode == 0, "the files written")
        # A device node (a cell drops CAP_MKNOD, so the node's engine makes it beside them),
        # and a closed directory of another user's, holding a file only its owner may read.
        node.docker("run", "--rm", "--network", "none", "-v",
                    f"{_volume(node, 'dev.devcell.cell=src')}:/w", IMAGE, "sh", "-c",
                    "mknod /w/zero c 1 5 && mkdir /w/closed && echo mine > /w/closed/f"
                    " && chmod 400 /w/closed/f && chmod 2700 /w/closed"
                    " && chown -R 1234:1234 /w/closed")
        began = time.monotonic()
        code, out, err = cli(state, "snapshot", "create", "src", "--name", "s1")
        seconds = time.monotonic() - began
        assert code == 0, err
        yield Taken(swarm, state, node, container, seconds)
    finally:
        swarm.remove_services()


def cells_node(state: Path, name: str) -> str:
    return cells(_Placed(state))[name]["NODE"]


@dataclass
class _Placed:
    state: Path


def _snapshot_row(state: Path) -> dict[str, str]:
    code, out, err = cli(state, "get", "snapshots", "-o", "wide")
    assert code == 0, err
    header, row = out.splitlines()[:2]
    return dict(zip(header.split(), row.split(), strict=False))


def test_a_snapshot_is_copied_on_its_node_with_the_cell_frozen_for_the_copy(
        taken: Taken) -> None:
    """The snapshot (taken by the fixture: ~1.5 s, three jobs) records its node, each step
    names it, the cell runs on thawed in the same container, and the checkpoint volume on that
    node (only there) holds every hostile entry as what it is. Cost ~1 s (the looks on the
    node), plus the fixture's ~4 s (apply, files, snapshot)."""
    print(f"\nsnapshot of a cell on the swarm in {taken.seconds:.1f} s")
    node = taken.node
    row = _snapshot_row(taken.state)
    assert row["PHASE"] == "Ready" and row["NODE"] == node.node_id, row
    code, out, _ = cli(taken.state, "describe", "snapshot", "s1")
    assert "Node:" in out and node.node_id in out, out
    code, out, _ = cli(taken.state, "get", "snapshot", "s1", "-o", "json")
    recorded = json.loads(out)["status"]["checkpoint"]
    # a, d/b, pw, fifo, sparse, suid, zero, closed/f; the regular files' sizes
    assert recorded["files"] == 8 and recorded["node"] == node.node_id, recorded
    assert recorded["bytes"] == 6 + 5 + SPARSE + 4 + Path("/bin/busybox").stat().st_size + 5

    # Each step of the operation names the node; the freeze was the cgroup's, not a stop.
    steps = _steps(taken.state, "s1")
    assert [s["name"] for s in steps] == ["quiesce", "checkpoint", "resume"], steps
    assert all(s["outputs"]["node"] == node.node_id for s in steps), steps
    assert steps[0]["outputs"]["frozen"] is True and steps[2]["outputs"]["thawed"] is True
    assert container_on(node, "src") == taken.container  # the same processes, thawed
    assert node.docker("inspect", "--format", "{{.State.Status}}", taken.container
                       ).stdout.decode().strip() == "running"

    # On the node: the checkpoint volume, labelled, holding each entry as what it is.
    volume = _volume(node, "dev.devcell.checkpoint")
    blocks = _look(node, volume, "stat -c %b /v/tree/sparse").strip()
    assert int(blocks) < 1024, blocks  # the holes kept: 100 GiB of zeros never written
    assert _look(node, volume, HOSTILE.format(root="/v/tree")) == _expected(blocks)
    for other in taken.swarm.nodes:
        if other is not node:
            assert other.docker("volume", "ls", "-q", "--filter", "label=dev.devcell.checkpoint"
                                ).stdout.decode().split() == []

    # Its files are on the node: an export is refused, never written without them.
    archive = taken.state.parent / "s1.tar"
    code, _, err = cli(taken.state, "snapshot", "export", "s1", "-o", str(archive))
    assert code != 0 and f"its files are on node {node.node_id}" in err, err
    assert "Traceback" not in err and not archive.exists()


def _steps(state: Path, snapshot: str) -> list[dict[str, object]]:
    """The steps of the snapshot's checkpoint operation, as recorded in the state database."""
    import sqlite3

    conn = sqlite3.connect(state / "state.db")
    conn.row_factory = sqlite3.Row
    try:
        op = conn.execute("SELECT id FROM operations WHERE object_name = ? AND action = "
                          "'checkpoint' ORDER BY rowid DESC LIMIT 1", (snapshot,)).fetchone()
        assert op is not None
        return [{"name": r["name"], "outputs": json.loads(r["outputs"] or "{}")}
                for r in conn.execute("SELECT name, outputs FROM operation_steps WHERE op_id = ? "
                                      "ORDER BY idx", (op["id"],))]
    finally:
        conn.close()


def test_a_fork_runs_on_the_snapshots_node_with_the_same_files(taken: Taken) -> None:
    """`cell fork`: the fork's workspace filled on the snapshot's node, the fork pinned and
    running there with the same entries. Cost ~2.5 s."""
    began = time.monotonic()
    code, _, err = cli(taken.state, "cell", "fork", "src", "--snapshot", "s1", "--name", "f1")
    seconds = time.monotonic() - began
    assert code == 0, err
    print(f"\nfork of a snapshot on the swarm in {seconds:.1f} s")
    rows = cells(_Placed(taken.state))
    node = taken.node
    assert rows["f1"]["PHASE"] == "Running" and rows["f1"]["NODE"] == node.node_id, rows["f1"]
    fork = container_on(node, "f1")
    assert fork
    spec = json.loads(taken.swarm.manager.docker(
        "service", "inspect", "--format", "{{json .Spec.TaskTemplate.Placement}}",
        _service_of(taken.swarm, "f1")).stdout)
    assert f"node.id=={node.node_id}" in spec["Constraints"]  # pinned where its files are
    blocks = node.docker("exec", fork, "stat", "-c", "%b", "/workspace/sparse").stdout.decode()
    shown = node.docker("exec", fork, "sh", "-c", HOSTILE.format(root="/workspace")
                        ).stdout.decode()
    assert shown == _expected(blocks.strip())
    assert int(blocks) < 1024
    # the fork's boot found its files there (`[ -e a ]`): nothing rewritten, nothing lost


def _fork_manifest(name: str, snapshot: str) -> str:
    """A cell made from `snapshot` that asks for a node labelled zone=far."""
    return manifest(name).replace(
        "  resources:", f"  workspace:\n    from: {{snapshot: {snapshot}}}\n"
                        "  placement:\n    nodeLabels: {zone: far}\n  resources:")


def _with_registry(state: Path, address: str) -> None:
    """The configuration names this test's registry (each test has its own)."""
    path = state / "config.yaml"
    kept = [line for line in path.read_text().splitlines() if "registry:" not in line]
    path.write_text("\n".join(kept) + f"\n  registry: {address}/devcell-test/moves\n")


def _fork_steps(state: Path, cell: str) -> list[dict[str, object]]:
    import sqlite3

    conn = sqlite3.connect(state / "state.db")
    conn.row_factory = sqlite3.Row
    try:
        rows = conn.execute(
            "SELECT s.name, s.outputs FROM operation_steps s JOIN operations o ON o.id = s.op_id"
            " WHERE o.object_name = ? ORDER BY o.rowid, s.idx", (cell,)).fetchall()
        return [{"name": r["name"], "outputs": json.loads(r["outputs"] or "{}")} for r in rows]
    finally:
        conn.close()


def test_a_fork_on_another_node_gets_the_snapshots_files_through_the_registry(
        taken: Taken, registry: Registry) -> None:
    """A cell made from s1 whose placement the snapshot's node does not meet (zone=far, set
    on another node only): the checkpoint is pushed from its node into the registry by a job
    there, pulled by a job on the node the swarm picks, and the fork runs there with every
    hostile entry as what it is (the link not followed, the fifo and device made, the 100 GiB
    of holes never written, setuid and the closed directory kept); the step names both
    nodes and the artifact. Then the registry's blob damaged: a second such fork is refused
    naming the digest, and nothing of it is left filled. Cost ~8 s (push ~1.5 s, pull
    ~1.5 s, the fork's start, the refused fork, the two deletes)."""
    swarm, state = taken.swarm, taken.state
    far = next(n for n in swarm.nodes if n is not taken.node)
    swarm.manager.docker("node", "update", "--label-add", "zone=far", far.node_id)
    _with_registry(state, registry.address)
    try:
        path = state.parent / "m1.yaml"
        path.write_text(_fork_manifest("m1", "s1"))
        began = time.monotonic()
        code, out, err = cli(state, "apply", "-f", str(path))
        seconds = time.monotonic() - began
        assert code == 0, (out, err)
        print(f"\nfork of a snapshot on another node through the registry in {seconds:.1f} s")
        row = cells(_Placed(state))["m1"]
        assert row["PHASE"] == "Running" and row["NODE"] == far.node_id, row
        fork = container_on(far, "m1")
        assert fork and container_on(taken.node, "m1") == ""
        blocks = far.docker("exec", fork, "stat", "-c", "%b", "/workspace/sparse"
                            ).stdout.decode().strip()
        assert int(blocks) < 1024, blocks
        assert far.docker("exec", fork, "sh", "-c", HOSTILE.format(root="/workspace")
                          ).stdout.decode() == _expected(blocks)
        step = next(s for s in _fork_steps(state, "m1") if s["name"] == "create-volume")
        outputs = step["outputs"]
        assert isinstance(outputs, dict)
        assert outputs["node"] == far.node_id and outputs["movedFrom"] == taken.node.node_id
        assert outputs["via"] == "registry" and outputs["pushedNow"] is True, outputs
        assert "zone=far" in str(outputs["why"]) and outputs["files"] == 8, outputs
        assert str(outputs["ref"]).startswith(f"{registry.address}/devcell-test/moves:")
        assert swarm.manager.docker("service", "ls", "-q", "--filter", "label=dev.devcell.job"
                                    ).stdout.decode().split() == []

        # The layer damaged in the registry: the next move pulls it and refuses it.
        blob = registry.blob_file(str(outputs["layer"]))
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
        path = state.parent / "m2.yaml"
        path.write_text(_fork_manifest("m2", "s1"))
        code, out, err = cli(state, "apply", "-f", str(path), "--timeout", "60s")
        assert code != 0 and "damaged or altered in the registry" in out + err, (out, err)
        assert str(outputs["layer"]) in out + err and "Traceback" not in err
        assert container_on(far, "m2") == ""
        records = [json.loads(f.read_text())
                   for f in (state / "cluster" / "volumes").glob("*.json")]
        assert not [r for r in records if r.get("cell") == "m2" and r.get("filled")], records
    finally:
        for cell in ("m2", "m1"):
            cli(state, "delete", "cell", cell, "--approve")
        swarm.manager.docker("node", "update", "--label-rm", "zone", far.node_id)


def _snapshot_id(state: Path, name: str) -> str:
    code, out, err = cli(state, "get", "snapshot", name, "-o", "json")
    assert code == 0, err
    return str(json.loads(out)["metadata"]["id"])


def _service_of(swarm: Swarm, cell: str) -> str:
    found = swarm.manager.docker("service", "ls", "-q", "--filter",
                                 f"label=dev.devcell.cell={cell}").stdout.decode().split()
    assert len(found) == 1, found
    return found[0]


def test_a_restore_puts_the_snapshots_files_back_on_the_node(taken: Taken) -> None:
    """`snapshot restore`: what the workspace holds that the snapshot does not is listed on
    the node (the approval gate names it); approved, the cell is stopped, a safety snapshot
    taken, the workspace replaced by a new volume filled from the checkpoint on the same node
    (the old one emptied), and the cell runs again there on the snapshot's files. Cost ~10 s
    (the diff, safety copy, fill and empty jobs, the stop and start)."""
    node = taken.node
    running = container_on(node, "src")
    node.docker("exec", running, "sh", "-c", "echo changed > /workspace/a; echo new > /workspace/n")
    code, out, err = cli(taken.state, "snapshot", "restore", "s1")
    assert code != 0 and "1 added, 1 changed, 0 removed" in err + out, (out, err)
    assert "+n" in err + out and "~a" in err + out
    code, out, err = cli(taken.state, "snapshot", "restore", "s1", "--approve")
    assert code == 0, (out, err)
    row = cells(_Placed(taken.state))["src"]
    assert row["PHASE"] == "Running" and row["NODE"] == node.node_id, row
    again = container_on(node, "src")
    assert again and again != running
    shown = node.docker("exec", again, "sh", "-c", HOSTILE.format(root="/workspace")
                        ).stdout.decode()
    blocks = node.docker("exec", again, "stat", "-c", "%b", "/workspace/sparse").stdout.decode()
    assert shown == _expected(blocks.strip())
    assert node.docker("exec", again, "test", "-e", "/workspace/n", check=False).returncode != 0
    volumes = node.docker("volume", "ls", "-q", "--filter", "label=dev.devcell.cell=src"
                          ).stdout.decode().split()
    assert len(volumes) == 2 and any(v.endswith("-r1") for v in volumes), volumes
    old = next(v for v in volumes if not v.endswith("-r1"))
    assert _look(node, old, "ls -A /v") == ""  # the replaced workspace emptied


def test_a_snapshot_of_a_cell_on_a_cordoned_node_says_why_it_cannot_be_taken(
        taken: Taken) -> None:
    """The swarm starts no task on a paused node, the node jobs included: the snapshot fails
    at once saying so (and what lets it run), rather than wait for a job that is never
    placed. Cost ~1 s."""
    node = taken.node
    code, _, err = cli(taken.state, "node", "cordon", node.node_id)
    assert code == 0, err
    try:
        began = time.monotonic()
        code, out, err = cli(taken.state, "snapshot", "create", "src", "--name", "s2",
                             "--timeout", "20s")
        assert code != 0 and time.monotonic() - began < 15, (out, err)
        assert f"node {node.node_id} is cordoned" in out + err, (out, err)
        assert f"devcell node uncordon {node.node_id}" in out + err
    finally:
        code, _, err = cli(taken.state, "node", "uncordon", node.node_id)
        assert code == 0, err
    code, _, err = cli(taken.state, "delete", "snapshot", "s2")
    assert code == 0, err


def test_gc_empties_an_orphan_checkpoint_on_its_node_only_with_approval(taken: Taken) -> None:
    """A checkpoint no object names (as a crash between its job and the snapshot's record
    leaves one) holding files: `gc` keeps it and says where it is; `gc --approve` empties it
    on its node by a job and forgets it. Cost ~1.5 s."""
    node = taken.node
    records = taken.state / "cluster" / "checkpoints"
    record = json.loads((records / f"{_snapshot_id(taken.state, 's1')}.json").read_text())
    volume = f"{record['volume']}-orphan"
    node.docker("run", "--rm", "--network", "none", "-v", f"{volume}:/c", IMAGE, "sh", "-c",
                "mkdir /c/tree && echo left > /c/tree/f")
    (records / "orphan1.json").write_text(json.dumps(dict(record, volume=volume,
                                                          cell_id="cell_gone")))
    code, out, err = cli(taken.state, "gc")
    assert code == 0 and "checkpoint/orphan1 kept" in out, (out, err)
    assert f"volume {volume} on node {node.node_id}" in out and "--approve" in out
    assert _look(node, volume, "cat /v/tree/f") == "left\n"
    code, out, err = cli(taken.state, "gc", "--approve")
    assert code == 0 and "checkpoint/orphan1 removed" in out, (out, err)
    assert _look(node, volume, "ls -A /v") == "" and not (records / "orphan1.json").exists()


def test_deleting_the_snapshot_empties_its_checkpoint_on_its_node(taken: Taken) -> None:
    """The fork deleted, then the snapshot: its tree removed on its node by a job, its record
    gone, no job left behind. Cost ~3 s."""
    node = taken.node
    volume = _volume(node, "dev.devcell.checkpoint=" + _snapshot_id(taken.state, "s1"))
    code, out, _ = cli(taken.state, "get", "snapshot", "s1", "-o", "json")
    snapshot_id = json.loads(out)["metadata"]["id"]
    code, _, err = cli(taken.state, "delete", "cell", "f1", "--approve")
    assert code == 0, err
    code, out, err = cli(taken.state, "delete", "snapshot", "s1")
    assert code == 0, (out, err)
    assert _look(node, volume, "ls -A /v") == ""  # the tree gone; the empty volume stays
    assert not (taken.state / "cluster" / "checkpoints" / f"{snapshot_id}.json").exists()
    code, out, _ = cli(taken.state, "get", "snapshots")
    assert "s1" not in out
    assert taken.swarm.manager.docker("service", "ls", "-q", "--filter", "label=dev.devcell.job"
                                      ).stdout.decode().split() == []


def test_a_cell_sleeps_and_wakes_on_its_node_with_its_files(taken: Taken) -> None:
    """Sleep: the workspace checkpointed on its node, the service removed (the workspace
    volume kept); start: a service pinned to that node again, on the same files. Cost ~9 s
    (most of it the engine stopping the task)."""
    node = taken.node
    code, _, err = cli(taken.state, "cell", "sleep", "src")
    assert code == 0, err
    assert cells(_Placed(taken.state))["src"]["PHASE"] == "Sleeping"
    taken.swarm.wait(lambda: container_on(node, "src") == "", "the task gone (its service "
                     "removed: the engine stops it at its own pace)", timeout=60)
    code, _, err = cli(taken.state, "cell", "start", "src")
    assert code == 0, err
    row = cells(_Placed(taken.state))["src"]
    assert row["PHASE"] == "Running" and row["NODE"] == node.node_id, row
    again = container_on(node, "src")
    assert again and again != taken.container
    assert node.docker("exec", again, "cat", "/workspace/a").stdout == b"hello\n"


OTHERS = ("d1", "d2", "d3", "d4")
"""The cells besides src on the drained node (issue 25: a drain of a node with 5 cells)."""


def _killed_drain(state: Path, node: str, failpoint: str) -> None:
    """`devcell node drain NODE` in its own process, SIGKILLed at `failpoint`."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, DEVCELL_FAILPOINT=failpoint,
               PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    done = subprocess.run([sys.executable, "-m", "devcell", "--state-dir", str(state), "node",
                           "drain", node], env=env, capture_output=True, timeout=300)
    assert done.returncode == -9, (done.returncode, done.stdout, done.stderr)


def test_draining_a_node_moves_its_cell_elsewhere_with_its_files(
        taken: Taken, registry: Registry) -> None:
    """`node drain` of a node with five cells (src and four more), killed -9 twice first:
    after the pull into the new node's volume (the cell still whole on its node, its old
    workspace there), and after the switch of its record (before the service follows).
    Each time the first cell moved has one service and its old
    workspace still holds its files. The third run finishes: the cell stopped, snapshotted
    (a Ready snapshot src-move-...), pushed once from its node, pulled on the node the swarm
    picked (the same one each run), started there with every hostile entry as what it is;
    its old workspace emptied on the old node once it ran; the node's availability drain;
    each step naming its node; the four other cells moved too, with their files, nothing of
    theirs left running on the drained node. Then src
    restored to its move snapshot, whose checkpoint is on the drained node: pulled from the
    registry onto src's new node. Cost ~50 s (the four cells' apply, two killed runs ~4 s
    each, the three moves, the restore ~8 s)."""
    swarm, state, node = taken.swarm, taken.state, taken.node
    _with_registry(state, registry.address)
    old = next(str(r["volume"]) for r in (json.loads(f.read_text()) for f in
               (state / "cluster" / "volumes").glob("*.json")) if r.get("cell") == "src")
    for other in swarm.nodes:  # four more cells on the node: the drain moves each
        if other is not node:
            swarm.manager.docker("node", "update", "--availability", "pause", other.node_id)
    try:
        for name in OTHERS:
            (state.parent / f"{name}.yaml").write_text(manifest(name))
            code, out, err = cli(state, "apply", "-f", str(state.parent / f"{name}.yaml"))
            assert code == 0, (out, err)
    finally:
        reset_nodes(swarm)
    for name in OTHERS:
        assert cells(_Placed(state))[name]["NODE"] == node.node_id
        made = container_on(node, name)
        swarm.wait(lambda made=made: node.docker(  # type: ignore[misc]
            "exec", made, "stat", "/workspace/suid", check=False).returncode == 0,
            "the files written")
    try:
        for failpoint in ("swarm.move.pulled", "swarm.move.committed"):
            _killed_drain(state, node.node_id, failpoint)
            assert len(swarm.manager.docker("service", "ls", "-q", "--filter",
                                            "label=dev.devcell.cell=src"
                                            ).stdout.decode().split()) == 1
            assert _look(node, old, "cat /v/a") == "hello\n", failpoint  # nothing lost
        began = time.monotonic()
        code, out, err = cli(state, "node", "drain", node.node_id)
        seconds = time.monotonic() - began
        assert code == 0, (out, err)
        said = out
        print(f"\ndrain of a node with five cells in {seconds:.1f} s (after two kills)")
        row = cells(_Placed(state))["src"]
        assert row["PHASE"] == "Running" and row["NODE"] not in ("", node.node_id), row
        assert f"cell/src moved to node {row['NODE']}" in out and "drained" in out, out
        there = next(n for n in swarm.nodes if n.node_id == row["NODE"])
        moved = container_on(there, "src")
        assert moved and container_on(node, "src") == ""
        blocks = there.docker("exec", moved, "stat", "-c", "%b", "/workspace/sparse"
                              ).stdout.decode().strip()
        assert int(blocks) < 1024
        assert there.docker("exec", moved, "sh", "-c", HOSTILE.format(root="/workspace")
                            ).stdout.decode() == _expected(blocks)
        assert _look(node, old, "ls -A /v") == ""  # the old workspace emptied, once it ran
        # The run that finished: the snapshot's checkpoint found complete, the switch the
        # killed run recorded finished, the start on the new node (the first run stopped it).
        steps = _fork_steps(state, "src")[-3:]
        assert [s["name"] for s in steps] == ["checkpoint", "restore-workspace", "start"], steps
        outputs = steps[1]["outputs"]
        assert isinstance(outputs, dict) and outputs["movedFrom"] == node.node_id
        assert outputs["node"] == there.node_id and outputs["via"] == "registry", outputs
        moved_to = {n.node_id for n in swarm.nodes if n is not node
                    and n.docker("volume", "ls", "-q", "--filter", "label=dev.devcell.cell=src"
                                 ).stdout.decode().split()}
        assert moved_to == {there.node_id}, moved_to  # one pull target, whatever the kills
        assert steps[2]["outputs"]["oldWorkspaceEmptied"] is True, steps[2]  # type: ignore[index]
        code, out, _ = cli(state, "get", "snapshots")
        assert "src-move-" in out, out
        availability = swarm.manager.docker("node", "inspect", "--format",
                                            "{{.Spec.Availability}}", node.node_id)
        assert availability.stdout.decode().strip() == "drain"
        # Restoring src to its move snapshot, whose checkpoint is on the drained node (no
        # job runs there now): pulled from the registry on src's new node.
        snapshot = next(line.split()[0] for line in out.splitlines()
                        if line.startswith("src-move-"))
        there.docker("exec", moved, "sh", "-c", "echo changed > /workspace/a")
        code, out, err = cli(state, "snapshot", "restore", snapshot, "--approve")
        assert code == 0, (out, err)
        restored = _fork_steps(state, "src")[-1:][0]
        assert restored["name"] == "start"
        step = next(s for s in reversed(_fork_steps(state, "src"))
                    if s["name"] == "restore-workspace")
        assert step["outputs"]["via"] == "registry", step  # type: ignore[index]
        assert step["outputs"]["checkpointNode"] == node.node_id, step  # type: ignore[index]
        assert step["outputs"]["node"] == there.node_id, step  # type: ignore[index]
        again = container_on(there, "src")
        assert there.docker("exec", again, "cat", "/workspace/a").stdout == b"hello\n"
        rows = cells(_Placed(state))
        for name in OTHERS:
            assert f"cell/{name} moved to node {rows[name]['NODE']}" in said, said
            assert rows[name]["PHASE"] == "Running" and rows[name]["NODE"] != node.node_id
            where = next(n for n in swarm.nodes if n.node_id == rows[name]["NODE"])
            assert where.docker("exec", container_on(where, name), "cat", "/workspace/a"
                                ).stdout == b"hello\n"
            assert container_on(node, name) == ""
    finally:
        reset_nodes(swarm)
        for name in OTHERS:
            cli(state, "delete", "cell", name, "--approve")


def test_a_node_is_drained_through_the_api(taken: Taken, registry: Registry) -> None:
    """`devcell --server unix:SOCK node drain NODE` against a daemon serving the module's
    state directory (`controller run --listen unix:SOCK`, as on a manager): the node src
    runs on now (the drain above moved it) drained through the API, the move carried out by
    the daemon. The same outcome as the drain on the state directory above: its lines
    (`cell/src moved to node ID`, `node/ID drained`) and exit 0, src Running on another
    node with its files, nothing of it left on the drained node, its availability drain.
    Cost ~15-25 s (the daemon's start and stop, one move of src)."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile

    from tests import processes

    swarm, state = taken.swarm, taken.state
    _with_registry(state, registry.address)
    node = next(n for n in swarm.nodes if n.node_id == cells_node(state, "src"))
    where = Path(tempfile.mkdtemp(prefix="drain-api-", dir="/tmp"))  # a short socket path
    (where / "manifests").mkdir()
    sock = where / "api.sock"
    with open(where / "daemon.log", "wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "devcell", "--state-dir", str(state), "controller", "run",
             "--manifests", str(where / "manifests"), "--resync", "0", "--listen",
             f"unix:{sock}"], stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3])),
            preexec_fn=processes.child_setup)
    try:
        swarm.wait(lambda: sock.exists() and _answers(f"unix:{sock}"), "the daemon's API",
                   timeout=60)
        code, out, err = _remote(f"unix:{sock}", "node", "drain", node.node_id)
        assert code == 0, (out, err, (where / "daemon.log").read_text()[-3000:])
        row = cells(_Placed(state))["src"]
        assert row["PHASE"] == "Running" and row["NODE"] not in ("", node.node_id), row
        assert out == f"cell/src moved to node {row['NODE']}\nnode/{node.node_id} drained\n"
        assert "error" not in err, err
        there = next(n for n in swarm.nodes if n.node_id == row["NODE"])
        moved = container_on(there, "src")
        assert there.docker("exec", moved, "cat", "/workspace/a").stdout == b"hello\n"
        assert container_on(node, "src") == ""
        availability = swarm.manager.docker("node", "inspect", "--format",
                                            "{{.Spec.Availability}}", node.node_id)
        assert availability.stdout.decode().strip() == "drain"
    finally:
        daemon.send_signal(signal.SIGTERM)  # its lease given back for the module's next test
        try:
            daemon.wait(30)
        finally:
            processes.end(daemon)
            reset_nodes(swarm)
            shutil.rmtree(where, ignore_errors=True)


def _answers(url: str) -> bool:
    """Whether the daemon's API answers at `url` yet."""
    from devcell import errors
    from devcell.client import Client

    try:
        Client(url).list("nodes")
    except errors.DevCellError:
        return False
    return True


def _remote(url: str, *words: str) -> tuple[int, str, str]:
    """A command line through the server at `url`, in this process."""
    import contextlib
    import io

    from devcell.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--server", url, *words])
    return code, out.getvalue(), err.getvalue()


def test_a_lost_nodes_cell_is_moved_on_request_from_its_last_pushed_snapshot(
        taken: Taken, registry: Registry) -> None:
    """With cluster.pushSnapshots, a snapshot of a cell on a worker is pushed when taken.
    The worker's engine killed: once the manager calls it down, `node drain` refuses it
    without --from-last-snapshot; with it, the cell is made on another node from that
    snapshot (its files as they were then: a file written after is not there, as the command
    said), and runs there. The engine started again, the node rejoins; the cell deleted, the
    old workspace left on that node is emptied too. Cost ~25-40 s (mostly the engine's own
    timeouts: 13-16 s to be called down, its restart)."""
    swarm, state = taken.swarm, taken.state
    _with_registry(state, registry.address)
    path = state / "config.yaml"
    path.write_text(path.read_text().rstrip("\n") + "\n  pushSnapshots: true\n")
    worker = swarm.nodes[2]
    for other in swarm.nodes:
        if other is not worker:
            swarm.manager.docker("node", "update", "--availability", "pause", other.node_id)
    try:
        cell = state.parent / "lc.yaml"
        cell.write_text(manifest("lc"))
        code, out, err = cli(state, "apply", "-f", str(cell))
        assert code == 0, (out, err)
    finally:
        reset_nodes(swarm)
    assert cells(_Placed(state))["lc"]["NODE"] == worker.node_id
    running = container_on(worker, "lc")
    swarm.wait(lambda: worker.docker("exec", running, "stat", "/workspace/suid",
                                     check=False).returncode == 0, "the files written")
    code, out, err = cli(state, "snapshot", "create", "lc", "--name", "lc1")
    assert code == 0, (out, err)
    record = json.loads((state / "cluster" / "checkpoints" /
                         f"{_snapshot_id(state, 'lc1')}.json").read_text())
    assert record["pushed"]["ref"].startswith(registry.address), record  # pushed when taken
    worker.docker("exec", running, "sh", "-c", "echo later > /workspace/later")
    old = next(str(r["volume"]) for r in (json.loads(f.read_text()) for f in
               (state / "cluster" / "volumes").glob("*.json")) if r.get("cell") == "lc")
    swarm.stop_engine(worker, kill=True)
    try:
        swarm.wait(lambda: swarm.manager.docker(
            "node", "inspect", "--format", "{{.Status.State}}", worker.node_id
        ).stdout.decode().strip() == "down", "the node called down", timeout=90)
        code, out, err = cli(state, "node", "drain", worker.node_id)
        assert code == 2 and "--from-last-snapshot" in err, (out, err)
        code, out, err = cli(state, "node", "drain", worker.node_id, "--from-last-snapshot")
        assert "cell/lc moving from snapshot/lc1" in out and "is lost" in out, (out, err)
        assert "cell/lc moved to node" in out, (out, err)
        # Another cell on that worker with no snapshot in the registry (the module's src, when
        # the swarm put it there) stays, said: its files are only on the lost node.
        stays = [line for line in err.splitlines() if line.startswith("error: cell/")]
        assert all("no snapshot of it is in" in line for line in stays), err
        assert code == (1 if stays else 0), (out, err)
        row = cells(_Placed(state))["lc"]
        assert row["PHASE"] == "Running" and row["NODE"] not in ("", worker.node_id), row
        there = next(n for n in swarm.nodes if n.node_id == row["NODE"])
        moved = container_on(there, "lc")
        assert there.docker("exec", moved, "cat", "/workspace/a").stdout == b"hello\n"
        assert there.docker("exec", moved, "test", "-e", "/workspace/later",
                            check=False).returncode != 0
    finally:
        swarm.start_engine(worker)
        swarm.wait(lambda: all_ready(swarm), "every node Ready", timeout=120)
        reset_nodes(swarm)
        code, _, err = cli(state, "delete", "cell", "lc", "--approve")
    assert code == 0, err
    # The old workspace the move left on the lost node, emptied with the cell once it is back.
    assert _look(worker, old, "ls -A /v") == ""
