"""Container cells placed by the session's test swarm (tests/swarm.py): a state directory whose
configuration names the manager's engine (cluster.engine) runs each cell as a service of one
task. One module-scoped set of 20 cells, applied at once with one node cordoned and two
labelled, serves every test here; the commands are run in-process (main()), as a user's.

Cost (measured at load ~3 on 2 cores): ~32 s for the module: the 20 cells' apply ~4 s (setup
~7 s), the restart ~3 s, the delete with its job ~2 s, the unplaceable cell ~1 s, the lost node
~16 s (the engine's own heartbeat timeout), the teardown ~3.5 s.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devcell.backends.container import swarm_cells
from devcell.backends.host.ids import state_hash
from devcell.cli.main import main
from tests.swarm import Node, Swarm, reset_nodes

CELLS = 20
IMAGE = "devcell/busybox:latest"
BOOT = "echo boot >> /workspace/boots; exec sleep 100000"


@dataclass
class Placed:
    swarm: Swarm
    state: Path
    cordoned: Node
    seconds: float


def configure(state: Path, engine: str) -> None:
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state / "config.yaml"
    path.write_text(f"apiVersion: devcell.dev/v1alpha1\nkind: Config\ncluster:\n  engine: {engine}\n")
    os.chmod(path, 0o600)


def manifest(name: str, *, ssd: bool, memory: str = "32Mi") -> str:
    placement = "  placement:\n    nodeLabels: {disk: ssd}\n" if ssd else ""
    return (f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata:\n  name: {name}\nspec:\n"
            f"  backend: container\n  image: {IMAGE}\n"
            f"  resources: {{memory: {memory}, cpus: 0.05}}\n{placement}"
            f"  services:\n    - name: boot\n      command: [sh, -c, {json.dumps(BOOT)}]\n")


def cli(state: Path, *words: str) -> tuple[int, str, str]:
    """A command line, its exit status and output (pytest's capture is the fixture's own)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--state-dir", str(state), *words])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def placed(swarm: Swarm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Placed]:
    state = tmp_path_factory.mktemp("swarm-cells") / "state"
    configure(state, swarm.manager.host)
    ssd, cordoned = swarm.nodes[:2], swarm.nodes[2]
    for node in ssd:
        swarm.manager.docker("node", "update", "--label-add", "disk=ssd", node.node_id)
    try:
        code, out, err = cli(state, "node", "cordon", cordoned.node_id)
        assert code == 0, err
        path = state.parent / "cells.yaml"
        path.write_text("---\n".join(manifest(f"c{i:02d}", ssd=i % 2 == 0)
                                     for i in range(CELLS)))
        began = time.monotonic()
        code, out, err = cli(state, "apply", "-f", str(path))
        seconds = time.monotonic() - began
        assert code == 0, err
        yield Placed(swarm, state, cordoned, seconds)
    finally:
        swarm.remove_services()
        reset_nodes(swarm)  # the cordoned node has no disk label: one update each failed


def cells(placed: Placed) -> dict[str, dict[str, str]]:
    """Each cell's row of `get cells -o wide`, by column header."""
    code, out, err = cli(placed.state, "get", "cells", "-o", "wide")
    assert code == 0, err
    lines = out.splitlines()
    starts = [(m.group(), m.start()) for m in re.finditer(r"\S+", lines[0])]
    rows = {}
    for line in lines[1:]:
        row = {name: line[at:(starts[i + 1][1] if i + 1 < len(starts) else None)].strip()
               for i, (name, at) in enumerate(starts)}
        rows[row["NAME"]] = row
    return rows


def task_node(swarm: Swarm, cell: str) -> str:
    """The node the running task of `cell`'s service is on, as the engine says."""
    out = swarm.manager.docker("service", "ps", "--filter", "desired-state=running", "-q",
                               "--no-trunc", f"{_service(swarm, cell)}").stdout.decode().split()
    assert len(out) == 1, out
    return swarm.manager.docker("inspect", "--type", "task", "--format", "{{.NodeID}}",
                                out[0]).stdout.decode().strip()


def _service(swarm: Swarm, cell: str) -> str:
    found = swarm.manager.docker("service", "ls", "-q", "--filter",
                                 f"label=dev.devcell.cell={cell}").stdout.decode().split()
    assert len(found) == 1, found
    return found[0]


def container_on(node: Node, cell: str) -> str:
    found = node.docker("ps", "-q", "--filter", f"label=dev.devcell.cell={cell}"
                        ).stdout.decode().split()
    assert len(found) <= 1, found
    return found[0] if found else ""


def test_cells_are_placed_by_the_swarm_as_their_placement_says(placed: Placed) -> None:
    swarm = placed.swarm
    print(f"\n{CELLS} cells applied on the swarm in {placed.seconds:.1f} s")
    rows = cells(placed)
    assert len(rows) == CELLS and {r["PHASE"] for r in rows.values()} == {"Running"}, rows
    ssd = {n.node_id for n in swarm.nodes[:2]}
    where = {name: row["NODE"] for name, row in rows.items()}
    for name, node in where.items():
        assert node == task_node(swarm, name), name  # recorded where the engine runs it
        assert node != placed.cordoned.node_id, name
        if int(name[1:]) % 2 == 0:
            assert node in ssd, name
    assert len(set(where.values())) == 2  # the scheduler spread them over both active nodes

    code, out, err = cli(placed.state, "get", "nodes", "-o", "json")
    assert code == 0, err
    items = {i["metadata"]["id"]: i for i in json.loads(out)["items"]}
    for node_id, item in items.items():
        mine = sorted(n for n, at in where.items() if at == node_id)
        assert item["status"]["cells"] == mine, node_id
        assert item["status"]["reserved"]["memoryBytes"] == len(mine) * (32 << 20)
    assert items[placed.cordoned.node_id]["spec"]["availability"] == "pause"

    # Pinned: the service's constraint names the node its workspace is on.
    spec = json.loads(swarm.manager.docker("service", "inspect", _service(swarm, "c00")).stdout)
    constraints = spec[0]["Spec"]["TaskTemplate"]["Placement"]["Constraints"]
    assert f"node.id=={where['c00']}" in constraints and "node.labels.disk==ssd" in constraints


def test_a_failed_task_comes_back_on_its_node_with_its_files(placed: Placed) -> None:
    swarm = placed.swarm
    node_id = cells(placed)["c01"]["NODE"]
    node = next(n for n in swarm.nodes if n.node_id == node_id)
    first = container_on(node, "c01")
    swarm.wait(lambda: node.docker("exec", first, "cat", "/workspace/boots",
                                   check=False).stdout == b"boot\n", "the first boot written")
    node.docker("kill", first)
    swarm.wait(lambda: container_on(node, "c01") not in ("", first), "the task restarted",
               timeout=60)
    again = container_on(node, "c01")
    swarm.wait(lambda: node.docker("exec", again, "cat", "/workspace/boots",
                                   check=False).stdout == b"boot\nboot\n",
               "the second boot written beside the first")
    assert task_node(swarm, "c01") == node_id
    for other in swarm.nodes:
        if other is not node:
            assert container_on(other, "c01") == ""


def test_delete_removes_the_service_and_empties_its_volume_on_the_node(placed: Placed) -> None:
    swarm = placed.swarm
    node_id = cells(placed)["c02"]["NODE"]
    node = next(n for n in swarm.nodes if n.node_id == node_id)
    volumes = node.docker("volume", "ls", "-q", "--filter", "label=dev.devcell.cell=c02"
                          ).stdout.decode().split()
    assert len(volumes) == 1 and volumes[0].startswith(f"devcell-{state_hash(placed.state)}-ws-")
    code, out, err = cli(placed.state, "delete", "cell", "c02", "--approve")
    assert (code, out) == (0, "cell/c02 deleted\n"), err
    assert swarm.manager.docker("service", "ls", "-q", "--filter",
                                "label=dev.devcell.cell=c02").stdout.decode().split() == []
    assert swarm.manager.docker("service", "ls", "-q", "--filter",
                                "label=dev.devcell.wipe").stdout.decode().split() == []
    listed = node.docker("run", "--rm", "--network", "none", "-v", f"{volumes[0]}:/w", IMAGE,
                         "ls", "-A", "/w").stdout
    assert listed == b""  # emptied on its node; the record on the manager gone
    assert list((placed.state / "cluster" / "volumes").glob("*.json")).__len__() == CELLS - 1
    assert "c02" not in cells(placed)


def test_a_cell_no_node_has_room_for_says_why(placed: Placed,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(swarm_cells, "UNPLACED_S", 1.0)
    path = placed.state.parent / "huge.yaml"
    path.write_text(manifest("huge", ssd=False, memory="1Ti"))
    code, out, err = cli(placed.state, "apply", "-f", str(path))
    assert code != 0
    assert "no node can run cell huge now" in err and "insufficient resources" in err, err


def test_the_cells_of_a_lost_node_are_unknown_and_never_recreated_elsewhere(
        placed: Placed) -> None:
    """A worker's dockerd killed: once the manager calls the node down (13-16 s), its cells
    are Unknown with the engine's reason, their tasks wait for that node only; started again,
    the node gets them back with their files. Cost ~30 s: the engine's own timeouts."""
    swarm = placed.swarm
    worker = swarm.nodes[1]
    rows = cells(placed)
    mine = sorted(name for name, row in rows.items() if row["NODE"] == worker.node_id)
    assert mine
    path = placed.state.parent / "cells.yaml"
    swarm.stop_engine(worker, kill=True)
    try:
        def down() -> bool:
            out = swarm.manager.docker("node", "inspect", "--format", "{{.Status.State}}",
                                       worker.node_id).stdout.decode().strip()
            return out == "down"

        swarm.wait(down, "the node called down", timeout=90)
        code, _, err = cli(placed.state, "apply", "-f", str(path))
        assert code != 0 and f"node {worker.node_id} is down (heartbeat failure)" in err, err
        rows = cells(placed)
        for name in mine:
            assert rows[name]["PHASE"] == "Unknown", rows[name]
            assert rows[name]["NODE"].startswith(f"node {worker.node_id} is down"), rows[name]
        others = {n.node_id for n in swarm.nodes} - {worker.node_id}
        for name in mine:  # nothing of theirs placed on another node
            out = swarm.manager.docker("service", "ps", "-q", "--no-trunc",
                                       _service(swarm, name)).stdout.decode().split()
            nodes = {swarm.manager.docker("inspect", "--type", "task", "--format",
                                          "{{.NodeID}}", t).stdout.decode().strip()
                     for t in out}
            assert not nodes & others, (name, nodes)
        code, out, _ = cli(placed.state, "describe", "cell", mine[0])
        assert "NodeDown" in out
    finally:
        swarm.start_engine(worker)
    swarm.wait(lambda: all(container_on(worker, name) for name in mine),
               "the cells running again on their node", timeout=120)
    code, _, err = cli(placed.state, "apply", "-f", str(path))
    rows = cells(placed)
    assert {rows[name]["PHASE"] for name in mine} == {"Running"}, err
    again = container_on(worker, mine[0])
    boots = worker.docker("exec", again, "cat", "/workspace/boots").stdout.decode()
    assert boots.startswith("boot\nboot\n"), boots  # its files: the first boot's line kept
