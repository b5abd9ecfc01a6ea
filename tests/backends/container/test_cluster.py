"""`devcell get nodes` and `node cordon/uncordon` on a real swarm (the session's test swarm of
private engines, tests/swarm.py), through a state directory whose configuration names the
manager's engine (cluster.engine). Run in-process (main()), as a user's command line.

Cost: ~3 s with the swarm up (two services started; the rest are reads of the manager).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from devcell.backends.host.ids import state_hash
from devcell.cli.main import main
from tests.swarm import Swarm

IMAGE = "devcell/busybox:latest"


def configure(state: Path, engine: str) -> None:
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state / "config.yaml"
    path.write_text(f"apiVersion: devcell.dev/v1alpha1\nkind: Config\ncluster:\n  engine: {engine}\n")
    os.chmod(path, 0o600)


def run(state: Path, capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str, str]:
    code = main(["--state-dir", str(state), *words])
    out, err = capsys.readouterr()
    return code, out, err


def running_on(swarm: Swarm, service: str) -> str:
    """The node id the service's task runs on, once it runs."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = swarm.manager.docker("service", "ps", service, "--format", "{{json .}}",
                                   "--no-trunc").stdout.decode()
        for line in out.splitlines():
            task = json.loads(line)
            if str(task["CurrentState"]).startswith("Running"):
                return swarm.manager.docker(
                    "inspect", "--type", "task", "--format", "{{.NodeID}}", task["ID"]
                ).stdout.decode().strip()
        time.sleep(0.1)
    raise AssertionError(f"{service} did not run")


def test_get_nodes_lists_the_swarm_with_devcells_cells_by_label(
        clean_swarm: Swarm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    swarm, worker = clean_swarm, clean_swarm.workers[0]
    state = tmp_path / "state"
    configure(state, swarm.manager.host)
    # A cell as the placement slice will run it: a service carrying DevCell's labels for this
    # state directory; and a service of someone else's on the same node, never counted.
    swarm.manager.docker(
        "service", "create", "-d", "-q", "--name", "devcell-api", "--stop-grace-period", "0s",
        "--label", "dev.devcell.managed=true", "--label", f"dev.devcell.state-dir={state_hash(state)}",
        "--label", "dev.devcell.cell=api", "--reserve-memory", "64M",
        "--constraint", f"node.id=={worker.node_id}", IMAGE, "sleep", "300")
    swarm.manager.docker(
        "service", "create", "-d", "-q", "--name", "not-ours", "--stop-grace-period", "0s",
        "--label", "dev.devcell.managed=true", "--label", "dev.devcell.state-dir=0000000000000000",
        "--label", "dev.devcell.cell=theirs",
        "--constraint", f"node.id=={worker.node_id}", IMAGE, "sleep", "300")
    swarm.manager.docker("node", "update", "--label-add", "disk=ssd", worker.node_id)
    assert running_on(swarm, "devcell-api") == worker.node_id
    running_on(swarm, "not-ours")

    code, out, err = run(state, capsys, "get", "nodes", "-o", "json")
    assert (code, err) == (0, "")
    items = {i["metadata"]["id"]: i for i in json.loads(out)["items"]}
    assert set(items) == {n.node_id for n in swarm.nodes}
    manager = items[swarm.manager.node_id]
    assert (manager["spec"]["role"], manager["status"]["leader"]) == ("manager", True)
    assert manager["status"]["address"].startswith(swarm.manager.address)
    mine = items[worker.node_id]
    assert mine["spec"] == {"role": "worker", "availability": "active"}
    assert mine["status"]["state"] == "ready" and mine["status"]["cells"] == ["api"]
    assert mine["status"]["tasks"] == 2 and mine["metadata"]["labels"] == {"disk": "ssd"}
    assert mine["status"]["reserved"]["memoryBytes"] == 64 << 20
    assert mine["status"]["capacity"]["cpus"] > 0 and mine["status"]["capacity"]["memoryBytes"] > 0
    for other in set(items) - {worker.node_id}:
        assert items[other]["status"]["cells"] == []

    code, out, err = run(state, capsys, "get", "nodes", "-l", "disk=ssd", "-o", "wide")
    assert (code, err) == (0, "")
    header, *lines = out.splitlines()
    assert header.split()[:7] == ["NAME", "ID", "ROLE", "STATUS", "AVAILABILITY", "CELLS", "AGE"]
    assert "CELL-NAMES" in header and len(lines) == 1
    assert worker.node_id in lines[0] and " api " in f" {lines[0]} "
    code, out, _ = run(state, capsys, "get", "nodes", worker.node_id, "-o", "name")
    assert (code, out) == (0, f"node/{worker.node_id}\n")


def test_cordon_and_uncordon_are_the_engines_availability(
        clean_swarm: Swarm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    swarm, worker = clean_swarm, clean_swarm.workers[-1]
    state = tmp_path / "state"
    configure(state, swarm.manager.host)

    def availability() -> str:
        return swarm.manager.docker("node", "inspect", "--format", "{{.Spec.Availability}}",
                                    worker.node_id).stdout.decode().strip()

    code, out, err = run(state, capsys, "node", "cordon", worker.node_id[:8])  # an id prefix
    assert (code, out, err) == (0, f"node/{worker.node_id} cordoned\n", "")
    assert availability() == "pause"
    code, out, _ = run(state, capsys, "node", "cordon", worker.node_id)
    assert (code, out) == (0, f"node/{worker.node_id} already cordoned\n")
    # The scheduler keeps new tasks off it: one constrained there stays pending.
    swarm.manager.docker("service", "create", "-d", "-q", "--name", "kept-off",
                         "--stop-grace-period", "0s", "--constraint",
                         f"node.id=={worker.node_id}", IMAGE, "sleep", "300")
    code, out, _ = run(state, capsys, "get", "nodes", worker.node_id)
    assert code == 0 and " pause " in out.splitlines()[1]
    time.sleep(1)
    state_now = swarm.manager.docker("service", "ps", "kept-off", "--format",
                                     "{{.CurrentState}}").stdout.decode()
    assert state_now.startswith("Pending"), state_now

    code, out, err = run(state, capsys, "node", "uncordon", worker.node_id)
    assert (code, out, err) == (0, f"node/{worker.node_id} uncordoned\n", "")
    assert availability() == "active"
    assert running_on(swarm, "kept-off") == worker.node_id
    code, out, _ = run(state, capsys, "get", "events", "-o", "json")
    changes = [(e["reason"], e["message"]) for e in json.loads(out)["items"]
               if e["object_kind"] == "Node"]
    assert [r for r, _ in changes] == ["NodeCordoned", "NodeUncordoned"], changes
    hostname = json.loads(swarm.manager.docker("node", "inspect", worker.node_id).stdout)[0][
        "Description"]["Hostname"]
    assert changes[0][1] == f"node {worker.node_id} ({hostname}): availability active -> pause"
    code, out, _ = run(state, capsys, "get", "events", "--for", f"node/{worker.node_id}",
                       "-o", "json")
    assert [e["reason"] for e in json.loads(out)["items"]] == ["NodeCordoned", "NodeUncordoned"]

    # Every node of the test swarm is called after the one kernel's hostname: ambiguous.
    code, out, err = run(state, capsys, "node", "cordon", hostname)
    assert (code, out) == (2, "") and "give a node id" in err and worker.node_id in err
    code, out, err = run(state, capsys, "node", "uncordon", "no-such-node")
    assert (code, out, err) == (1, "", 'error: node "no-such-node" not found\n')


def test_an_engine_that_is_not_a_manager_or_not_there_is_named(
        swarm: Swarm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    configure(state, swarm.workers[0].host)
    code, out, err = run(state, capsys, "get", "nodes")
    assert (code, out) == (1, "")
    assert "is not a swarm manager" in err and f"cluster.engine in {state}/config.yaml" in err
    configure(state, f"unix://{tmp_path}/absent.sock")
    code, out, err = run(state, capsys, "node", "cordon", "x")
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and "does not answer (No such file or directory)" in err
    assert "Traceback" not in err


def test_a_node_whose_engine_dies_is_shown_down_with_the_engines_reason(
        clean_swarm: Swarm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A worker's dockerd killed (no goodbye): the manager calls the node down after its
    heartbeats fail (13-16 s here), and `get nodes` shows it so, with the engine's message;
    started again on its data-root it rejoins and is Ready. The cells of such a node are to
    be shown Unknown from this (docs/cluster.md). Cost ~20 s: the engine's own timeouts."""
    swarm, worker = clean_swarm, clean_swarm.workers[-1]
    state = tmp_path / "state"
    configure(state, swarm.manager.host)

    def shown() -> dict:
        code, out, err = run(state, capsys, "get", "nodes", worker.node_id, "-o", "json")
        assert (code, err) == (0, "")
        return json.loads(out)["status"]

    swarm.stop_engine(worker, kill=True)
    try:
        swarm.wait(lambda: shown()["state"] != "ready", "the node called down", timeout=90)
        status = shown()
        assert (status["state"], status["message"]) == ("down", "heartbeat failure"), status
        code, out, _ = run(state, capsys, "get", "nodes")
        row = next(line for line in out.splitlines() if worker.node_id in line)
        assert " Down " in row
    finally:
        swarm.start_engine(worker)
        swarm.wait(lambda: shown()["state"] == "ready", "the node ready again", timeout=90)
