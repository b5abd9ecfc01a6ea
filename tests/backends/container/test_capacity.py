"""Capacity accounting on the real engine, through the CLI as a user runs it: `df` and
`get -o wide` agree with `du` (hard links shared between checkpoints counted once), a dirty
cell shows the bytes it changed since its last snapshot, and a running cell's memory is
what the engine's own stats report."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.container import spec as container_spec
from devcell.backends.container.layout import Layout
from tests.backends.engine import IMAGE
from tests.conftest import Cli

HELD = 24 * 2**20
"""Bytes the cell's service keeps in memory (a file on its /dev/shm tmpfs)."""


def _du(*paths: Path, apparent: bool = False) -> int:
    flags = ["-scB1", "--apparent-size"] if apparent else ["-scB1"]
    done = subprocess.run(["du", *flags, *map(str, paths)], capture_output=True, text=True,
                          check=True)
    return int(done.stdout.splitlines()[-1].split()[0])


SERVICE = ("mkdir -p /workspace/d; i=0; while [ $i -lt 60 ]; do head -c $((4000 + i * 97)) "
           "/dev/urandom > /workspace/d/f$i; i=$((i + 1)); done; "
           f"head -c {HELD} /dev/urandom > /dev/shm/held; touch /workspace/ready; sleep 600")


def _manifest(directory: Path) -> Path:
    path = directory / "box.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: box}}
        spec:
          backend: container
          image: {IMAGE}
          network: {{mode: none}}
          workspace: {{mountPath: /workspace}}
          services:
            - name: main
              command: [sh, -c, "{SERVICE}"]
        """))
    return path


def _df(cli: Cli) -> dict[str, Any]:
    done = cli("df", "-v", "-o", "json")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _items(doc: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {i["owner"] if kind != "Checkpoints" else i["name"]: i for i in doc["items"]
            if i["type"] == kind}


@pytest.fixture
def box(engine: None, cli: Cli, tmp_path: Path) -> Path:
    applied = cli("apply", "-f", str(_manifest(tmp_path)))
    assert applied.returncode == 0, applied.stderr
    waited = cli("exec", "box", "--", "sh", "-c",
                 "while [ ! -e /workspace/ready ]; do sleep 0.1; done")
    assert waited.returncode == 0, waited.stderr
    return tmp_path


def _change(cli: Cli, script: str) -> None:
    done = cli("exec", "box", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr


def test_checkpoints_and_workspace_in_df_match_du(cli: Cli, state_dir: Path, box: Path) -> None:
    for snap, script in (("s1", "true"), ("s2", "head -c 50000 /dev/urandom > /workspace/d/f1"),
                         ("s3", "head -c 70000 /dev/urandom > /workspace/d/f2; rm /workspace/d/f3")):
        _change(cli, script)
        taken = cli("snapshot", "create", "box", "--name", snap)
        assert taken.returncode == 0, taken.stderr
    layout = Layout(state_dir)
    paths = sorted(layout.checkpoints.iterdir())
    assert len(paths) == 3
    doc = _df(cli)
    rows = {r["type"]: r for r in doc["types"]}
    assert rows["Checkpoints"]["sizeBytes"] == _du(*paths)  # each shared inode once
    assert rows["Checkpoints"]["sizeBytes"] < _du(paths[0]) * 2  # far less than 3 copies
    checkpoints = _items(doc, "Checkpoints")
    ids = {p.name: p for p in paths}
    names = json.loads(cli("get", "snapshots", "-o", "json").stdout)["items"]
    by_name = {n["metadata"]["name"]: ids[n["metadata"]["id"]] for n in names}
    # s2 changed one file: a layer over s1 (which it keeps); s3 deleted one: a full tree
    over = {n: json.loads((p / "checkpoint.json").read_text()).get("over")
            for n, p in by_name.items()}
    assert over == {"s1": None, "s2": by_name["s1"].name, "s3": None}
    for name, path in by_name.items():
        others = [p for p in paths if p != path]
        below = [ids[over[name]]] if over[name] else []
        assert checkpoints[name]["logicalBytes"] == sum(_du(p, apparent=True)
                                                        for p in [path, *below])
        kept = any(o == path.name for o in over.values())  # a layer stands on it
        assert checkpoints[name]["sizeBytes"] == (
            0 if kept else _du(*paths) - _du(*others)), name
    volume = next(layout.volumes.iterdir())
    workspace = _items(doc, "Workspaces")["box"]
    assert workspace["logicalBytes"] == _du(volume / "workspace", apparent=True)
    assert workspace["sizeBytes"] + _items(doc, "Logs")["box"]["sizeBytes"] == _du(volume)
    for argv in (("get", "snapshots", "-o", "wide"), ("snapshot", "list", "box", "-o", "wide")):
        header, *rows = cli(*argv).stdout.splitlines()
        unique = [row[header.index("UNIQUE"):].strip() for row in rows]
        assert len(unique) == 3 and all(u.endswith("B") for u in unique), (argv, rows)
        assert unique[0] == "0 B", rows  # s1: the layer s2 stands on it


def test_a_dirty_cell_shows_the_bytes_changed_since_its_last_snapshot(
        cli: Cli, box: Path) -> None:
    assert cli("snapshot", "create", "box", "--name", "s1").returncode == 0
    clean = _items(_df(cli), "Workspaces")["box"]
    assert (clean["since"], clean["changedFiles"], clean["changedBytes"]) == ("s1", 0, 0)
    assert " no " in cli("get", "cells", "box", "-o", "wide").stdout
    _change(cli, "head -c 123456 /dev/urandom > /workspace/new; "
                 "head -c 1000 /dev/urandom >> /workspace/d/f7; chmod 600 /workspace/d/f8")
    dirty = _items(_df(cli), "Workspaces")["box"]
    f7, f8 = 4000 + 7 * 97 + 1000, 4000 + 8 * 97
    assert (dirty["changedFiles"], dirty["changedBytes"]) == (3, 123456 + f7 + f8)
    wide = cli("get", "cells", "box", "-o", "wide")
    assert wide.returncode == 0 and "in 3 files" in wide.stdout, wide.stdout + wide.stderr
    assert "3 files changed since s1" in cli("df", "-v").stdout
    assert cli("snapshot", "create", "box", "--name", "s2").returncode == 0
    _change(cli, "echo one >> /workspace/new")
    assert "1 file changed since s2" in cli("df", "-v").stdout


def test_memory_of_a_running_cell_matches_the_engines_stats(
        cli: Cli, box: Path, docker_client: Any) -> None:
    runtime = next(iter(_items(_df(cli), "Runtimes").values()))
    container = next(c for c in docker_client.containers.list()
                     if c.labels.get(container_spec.CELL_ID) == runtime["name"])
    stats = container.stats(stream=False)["memory_stats"]
    inactive = stats["stats"].get("total_inactive_file", stats["stats"].get("inactive_file", 0))
    engine = stats["usage"] - inactive  # what `docker stats` shows
    again = next(iter(_items(_df(cli), "Runtimes").values()))
    ours = again["memoryBytes"]
    assert ours >= HELD  # the tmpfs file the service holds is charged to its cgroup
    assert abs(ours - engine) <= max(2 * 2**20, engine // 20), (ours, engine)
    assert again["cpuSeconds"] > 0 and again["cgroup"] in ("v1", "v2")
    header, row = cli("get", "cells", "box", "-o", "wide").stdout.splitlines()
    memory = row[header.index("MEMORY"):header.index("CPU")].strip()
    assert memory.endswith("MiB") and float(memory.split()[0]) * 2**20 >= HELD * 0.9, row


def test_with_the_engine_unreachable_df_still_measures_the_disk(
        cli: Cli, state_dir: Path, box: Path, tmp_path: Path) -> None:
    away = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    done = cli("df", "-v", "-o", "json", env=away)
    assert done.returncode == 0, done.stderr
    assert "warning: backend container: runtimes not measured" in done.stderr
    assert "no such socket" in done.stderr
    doc = json.loads(done.stdout)
    volume = next(Layout(state_dir).volumes.iterdir())
    workspace = _items(doc, "Workspaces")["box"]
    assert workspace["logicalBytes"] == _du(volume / "workspace", apparent=True)
    assert _items(doc, "Runtimes") == {}
    wide = cli("get", "cells", "-o", "wide", env=away)
    assert wide.returncode == 0 and "never checkpointed" in wide.stdout, wide.stderr
