"""`get nodes` and `node cordon` without a cluster (the single-host default): one node, this
machine, with every cell the state directory records; cordon refused, nothing changed. The
swarm side is tests/backends/container/test_cluster.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

from devcell.api import nodes
from tests.conftest import EXAMPLES, Cli, db_fingerprint


def test_a_single_host_is_one_node_with_every_recorded_cell(state_dir: Path, cli: Cli) -> None:
    listed = cli("get", "nodes")
    assert listed.returncode == 0, listed.stderr
    assert not state_dir.exists() or not (state_dir / "state.db").exists()  # nothing made
    header, row = listed.stdout.splitlines()
    assert row.split()[:6] == [os.uname().nodename, "local", "local", "Ready", "active", "0"]
    applied = cli("apply", "-f", str(EXAMPLES / "api.yaml"))
    assert applied.returncode == 0, applied.stderr
    found = nodes.list_nodes(state_dir)
    assert [(n.id, n.role, n.cells) for n in found] == [("local", "local", ("api",))]
    document = json.loads(cli("get", "nodes", "local", "-o", "json").stdout)
    assert document["kind"] == "Node" and document["status"]["cells"] == ["api"]
    assert document["status"]["capacity"]["cpus"] == float(os.cpu_count() or 0)
    assert cli("get", "nodes", "-o", "name").stdout == "node/local\n"


def test_cordon_is_refused_without_a_cluster(state_dir: Path, cli: Cli) -> None:
    cli("apply", "-f", str(EXAMPLES / "api.yaml"))
    before = db_fingerprint(state_dir)
    for verb in ("cordon", "uncordon"):
        done = cli("node", verb, "local")
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr == (f"error: no cluster is configured (cluster.engine in "
                               f"{state_dir}/config.yaml): a single host has no scheduler to "
                               "keep cells off it; see docs/cluster.md\n")
    assert db_fingerprint(state_dir) == before
    missing = cli("get", "nodes", "elsewhere")
    assert (missing.returncode, missing.stderr) == (1, 'error: node "elsewhere" not found\n')
