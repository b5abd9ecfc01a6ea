"""`devcell node drain` (devcell/api/drain.py) on the fake backend: its refusals, and which
cells it picks and what it records for them, with no swarm.

The fake backend's cells run on no node, and it cannot move a workspace (it is not
`base.Moving`): these tests give a fake cell a node by writing the control plane's record of
its workspace as the swarm backend writes it (`cluster/volumes/<id>.json`), and answer the
manager's node list from a crafted engine on a unix socket (tests/api/test_nodes.py's). So
they show drain.py's own choices: the refusals before anything is recorded, the lost node's
cell with no pushed snapshot left where it is, the one with a pushed snapshot given a move
request naming it (and its failure reported: the fake backend has nowhere to move it). The
moves themselves, the kills in the middle of one, and the node's availability are
tests/backends/container/test_swarm_workspaces.py's, on a real 3-node swarm.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.api import drain
from devcell.backends.container.swarm_cells import Volumes
from devcell.errors import UsageError
from devcell.store import objects, restores
from devcell.store.db import open_database
from tests.api.test_nodes import _Answer, _Engine
from tests.conftest import EXAMPLES, Cli, db_fingerprint

REGISTRY = "127.0.0.1:5999/devcell-test/moves"


def _node(node_id: str, *, availability: str = "active", state: str = "ready") -> dict[str, Any]:
    return {"ID": node_id, "Description": {"Hostname": "vm"},
            "Spec": {"Role": "worker", "Availability": availability},
            "Status": {"State": state}}


@pytest.fixture
def cluster(state_dir: Path, tmp_path: Path, cli: Cli) -> Iterator[Callable[..., None]]:
    """cluster(*nodes): the state directory's cluster.engine answers these nodes; the fake
    cell `api` applied, its workspace recorded on node `lost`."""
    sock = tmp_path / "engine.sock"
    engine = _Engine(str(sock), _Answer)
    engine.answers = {"/tasks": [], "/services": []}
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = state_dir / "config.yaml"
    config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\ncluster:\n"
                      f"  engine: unix://{sock}\n  registry: {REGISTRY}\n")
    os.chmod(config, 0o600)
    applied = cli("apply", "-f", str(EXAMPLES / "api.yaml"))
    assert applied.returncode == 0, applied.stderr
    Volumes(state_dir).write("vol_api", {"cell_id": _cell(state_dir).id, "cell": "api",
                                         "node": "lost", "volume": "devcell-x-ws-vol_api"})

    def answer(*nodes: dict[str, Any]) -> None:
        engine.answers["/nodes"] = list(nodes)

    try:
        yield answer
    finally:
        engine.shutdown()
        engine.server_close()


def _cell(state_dir: Path) -> objects.ObjectRecord:
    db = open_database(state_dir)
    try:
        found = objects.get(db.conn, "Cell", "api")
        assert found is not None
        return found
    finally:
        db.close()


def test_a_drain_without_a_cluster_is_refused_and_changes_nothing(state_dir: Path,
                                                                   cli: Cli) -> None:
    assert cli("apply", "-f", str(EXAMPLES / "api.yaml")).returncode == 0
    before = db_fingerprint(state_dir)
    with pytest.raises(UsageError, match="no cluster is configured .*a single host has no "
                                         "other node to move its cells to"):
        drain.drain(state_dir, "local")
    assert db_fingerprint(state_dir) == before


def test_a_cordoned_node_and_a_lost_one_are_refused_before_anything_is_recorded(
        state_dir: Path, cluster: Callable[..., None]) -> None:
    cluster(_node("paused", availability="pause"), _node("lost", state="down"), _node("other"))
    before = db_fingerprint(state_dir)
    with pytest.raises(UsageError, match="node paused is cordoned: the jobs that checkpoint"):
        drain.drain(state_dir, "paused")
    with pytest.raises(UsageError, match="node lost is down: .*--from-last-snapshot"):
        drain.drain(state_dir, "lost")
    assert db_fingerprint(state_dir) == before
    assert restores.of(_cell(state_dir)) is None


def test_a_lost_nodes_cell_moves_only_from_a_snapshot_in_the_registry(
        state_dir: Path, cli: Cli, cluster: Callable[..., None]) -> None:
    """A snapshot taken but never pushed: the cell stays, the command says why, nothing is
    recorded and the node is not drained. Once its checkpoint's record says it is in the
    cluster's registry: a move request naming that snapshot (no checkpoint of its own: the
    node is lost), carried out at once, and its failure reported (the fake backend cannot
    move a workspace), the node still not drained."""
    cluster(_node("lost", state="down"), _node("other"))
    assert cli("snapshot", "create", "api", "--name", "kept").returncode == 0
    before = db_fingerprint(state_dir)
    result = drain.drain(state_dir, "lost", from_last_snapshot=True)
    assert result.failed == [("api", f"no snapshot of it is in {REGISTRY}; its files are "
                                     "only on node lost")]
    assert (result.moved, result.from_snapshots, result.drained) == ([], [], False)
    assert db_fingerprint(state_dir) == before

    db = open_database(state_dir)
    try:
        snap_id, taken = db.conn.execute(
            "SELECT id, taken_at FROM snapshots WHERE name = 'kept'").fetchone()
    finally:
        db.close()
    Volumes(state_dir, "checkpoints").write(snap_id, {"pushed": {"registry": REGISTRY}})
    result = drain.drain(state_dir, "lost", from_last_snapshot=True)
    assert result.from_snapshots == [("api", "kept", taken)]
    assert result.moved == [] and not result.drained
    ((name, why),) = result.failed
    assert name == "api" and "the fake backend runs its cells on one machine" in why, why
