"""`get nodes` and `node cordon` without a cluster (the single-host default): one node, this
machine, with every cell the state directory records; cordon refused, nothing changed. The
swarm side is tests/backends/container/test_cluster.py."""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import threading
from pathlib import Path
from typing import Any

import pytest

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


class _Engine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """A manager's engine answering crafted JSON: a faulty or hostile machine."""

    daemon_threads = True
    answers: dict[str, Any]


class _Answer(http.server.BaseHTTPRequestHandler):
    server: _Engine

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        body = json.dumps(self.server.answers.get(self.path.split("?")[0], [])).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self) -> str:
        return "engine"

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("node", [
    {"ID": "n1", "Spec": ["not", "an", "object"]},
    {"ID": "n1", "Spec": {"Labels": ["a"]}},
    {"ID": "n1", "Description": {"Resources": {"NanoCPUs": "lots"}}},
    {"ID": "n1", "Description": {"Resources": {"MemoryBytes": {"a": 1}}}},
])
def test_a_node_the_engine_describes_in_bad_shapes_is_an_error_not_a_traceback(
        state_dir: Path, cli: Cli, tmp_path: Path, node: dict[str, Any]) -> None:
    sock = tmp_path / "engine.sock"
    engine = _Engine(str(sock), _Answer)
    engine.answers = {"/nodes": [node], "/tasks": [{"NodeID": "n1", "Spec": {"Resources": {
        "Reservations": {"NanoCPUs": "z"}}}}], "/services": []}
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        config = state_dir / "config.yaml"
        config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\ncluster:\n"
                          f"  engine: unix://{sock}\n")
        os.chmod(config, 0o600)
        listed = cli("get", "nodes", "-o", "wide")
    finally:
        engine.shutdown()
        engine.server_close()
    assert listed.returncode != 0 and "Traceback" not in listed.stderr, listed.stderr
    assert "node n1" in listed.stderr and "the swarm manager's engine" in listed.stderr


def test_a_nodes_hostname_and_labels_are_printed_escaped(state_dir: Path, cli: Cli,
                                                         tmp_path: Path) -> None:
    sock = tmp_path / "engine.sock"
    engine = _Engine(str(sock), _Answer)
    engine.answers = {"/nodes": [{"ID": "n1", "Description": {"Hostname": "h\x1b[2Jx"},
                                  "Spec": {"Labels": {"zone": "a\x07\x1b]0;t"}},
                                  "Status": {"State": "ready\x1b[1m", "Message": "m\rX"}}],
                      "/tasks": [], "/services": []}
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        config = state_dir / "config.yaml"
        config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\ncluster:\n"
                          f"  engine: unix://{sock}\n")
        os.chmod(config, 0o600)
        shown = [cli("get", "nodes", *words) for words in (
            ["-o", "wide", "--show-labels"], ["-L", "zone"], ["-o", "name"], ["-o", "yaml"])]
    finally:
        engine.shutdown()
        engine.server_close()
    for done in shown:
        assert done.returncode == 0, done.stderr
        assert not any(c in done.stdout for c in "\x1b\x07\r"), repr(done.stdout)


def _swarm_node() -> nodes.Node:
    return nodes.Node(name="w1", id="abc123", role="worker", availability="pause",
                      state="ready", address="127.0.0.2", leader=False, message="",
                      engine="20.10.24", created="2026-12-01T10:00:00Z",
                      labels={"zone": "a"}, cpus=2.0, memory_bytes=1 << 30, reserved_cpus=0.5,
                      reserved_memory_bytes=256 << 20, tasks=3, cells=("api", "web"))


@pytest.mark.parametrize("node", [_swarm_node(), nodes.Node(
    name="vm", id="local", role="local", availability="active", state="ready", address=None,
    cpus=None, memory_bytes=None, tasks=-1, cells=())], ids=["swarm", "single-host"])
def test_a_nodes_document_reads_back_as_the_same_node(node: nodes.Node) -> None:
    """What a server lists is what the CLI's remote mode prints from (cli/cmd_nodes.served):
    the node it was made from, field for field, through JSON."""
    assert nodes.from_document(json.loads(json.dumps(node.document()))) == node


@pytest.mark.parametrize("damage", [
    lambda d: d.update(kind="Cell"), lambda d: d.pop("status"),
    lambda d: d["metadata"].update(name=7), lambda d: d["metadata"].update(labels={"a": 1}),
    lambda d: d["status"].update(cells="api"), lambda d: d["status"].update(tasks="3"),
    lambda d: d["status"]["capacity"].update(cpus=True), lambda d: d["status"].update(
        reserved=[1])], ids=["kind", "no-status", "name", "labels", "cells", "tasks", "cpus",
                             "reserved"])
def test_a_document_that_is_not_a_node_is_refused(damage: Any) -> None:
    """A hostile or broken server's answer is a ValueError (said as "not DevCell's API" by
    the CLI), never a traceback."""
    doc = _swarm_node().document()
    damage(doc)
    with pytest.raises(ValueError):
        nodes.from_document(doc)


@pytest.mark.parametrize("figure", [float("inf"), float("-inf"), float("nan"), 10 ** 400],
                         ids=["infinity", "-infinity", "nan", "huge"])
@pytest.mark.parametrize("where", ["memory", "tasks", "reserved", "cpus"])
def test_a_nodes_figure_that_is_not_finite_is_refused(figure: Any, where: str) -> None:
    """JSON's Infinity (or 1e400) and a 400-digit integer from a hostile server: int() and the
    table's sizes raised OverflowError, a traceback (attack44), not "not DevCell's API"."""
    doc = _swarm_node().document()
    status = doc["status"]
    {"memory": lambda: status["capacity"].update(memoryBytes=figure),
     "tasks": lambda: status.update(tasks=figure),
     "reserved": lambda: status["reserved"].update(memoryBytes=figure),
     "cpus": lambda: status["capacity"].update(cpus=figure)}[where]()
    with pytest.raises(ValueError):
        nodes.from_document(doc)
