"""What a vm cell holds on disk, as `devcell df` and `get -o wide` show it to a user, against
`du -sxB1` of the same files: a sleeping machine's RAM file and directory, a machine
snapshot's memory part, and what deleting that snapshot frees. Real QEMU (TCG here): one
machine, one sleep, one machine snapshot."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from devcell.api import render
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.layout import VmLayout
from tests.backends.vm.conftest import cell_manifest, make_state
from tests.backends.vm_machines import kill_machines
from tests.conftest import Cli

ROWS = ("Workspaces", "Fork layers", "Checkpoints", "Logs", "Runtimes")
"""df's rows of what a vm cell holds (Images are the container engine's)."""


def du(*paths: Path) -> int:
    out = subprocess.run(["du", "-scxB1", *map(str, paths)], capture_output=True, text=True,
                         check=True).stdout
    return int(out.splitlines()[-1].split()[0])


def _manifest(tmp_path: Path) -> Path:
    return cell_manifest(tmp_path, "vmcap")


def _df(cli: Cli) -> dict[str, Any]:
    """`df -v -o json`, once what was just written is on disk: ext4 allocates a new file's
    extent blocks at writeback, so st_blocks (what df and du count) can grow by a few blocks
    between df's reading and the test's own (12 KiB, on a loaded CI machine)."""
    os.sync()
    done = cli("df", "-v", "-o", "json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _items(doc: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in doc["items"] if i["type"] == kind and i["backend"] == "vm"}


def _rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["type"]: r for r in doc["types"]}


def _column(cli: Cli, kind: str, name: str, column: str) -> str:
    """One cell of `get KIND -o wide` (columns are cut at their headers)."""
    done = cli("get", kind, "-o", "wide")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    row = next(r for r in rows if r.split()[0] == name)
    start = header.index(column)
    following = [header.index(h, start + 1) for h in header[start:].split()[1:2]]
    return row[start:following[0] if following else None].strip()


def _held_files(layout: VmLayout, *, live_top: str | None = None) -> list[Path]:
    """Every file DevCell counts for vm cells: machines' directories, volumes', checkpoints',
    machine snapshots' parts, and the layers (qcow2 and record), less a layer a running
    machine writes."""
    paths = [*layout.cells.iterdir(), *layout.volumes.iterdir(), *layout.checkpoints.iterdir(),
             *layout.machines.iterdir()]
    paths += [p for p in layout.layers.iterdir() if p.suffix in (".qcow2", ".json")
              and p.stem != live_top and not p.name.startswith(".")]
    return [p for p in paths if not p.name.startswith(".")]


def _chain(layout: VmLayout, layer: str) -> list[Path]:
    out = []
    current: str | None = layer
    while current:
        out += [layout.layers / f"{current}.qcow2", layout.layers / f"{current}.json"]
        current = json.loads((layout.layers / f"{current}.json").read_text()).get("parent")
    return out


def test_df_and_wide_views_count_a_machines_ram_sleep_and_memory_snapshot_as_du_does(
        cli: Cli, tmp_path: Path, state_dir: Path, vm_cache: Path) -> None:
    make_state(state_dir, vm_cache)
    layout = VmLayout(state_dir)
    try:
        applied = cli("apply", "-f", str(_manifest(tmp_path)), timeout=300)
        assert applied.returncode == 0, applied.stderr
        [cell] = list(layout.cells.iterdir())
        # Asleep: no QEMU, its RAM file kept for the wake, its device state a checkpoint.
        assert cli("cell", "sleep", "vmcap", timeout=300).returncode == 0
        assert not vm_proc.scan(layout.name_prefix)
        doc = _df(cli)
        runtime = _items(doc, "Runtimes")[cell.name]
        ram = du(cell / "ram.bin")
        assert 0 < ram < (cell / "ram.bin").stat().st_size  # blocks, not the sparse size
        assert (runtime["active"], runtime["ramFileBytes"]) == (True, ram)
        assert runtime["sizeBytes"] == du(cell) and runtime["detail"].startswith("asleep")
        [sleep] = list(layout.checkpoints.iterdir())
        saved = next(iter(_items(doc, "Checkpoints").values()))
        assert saved["memoryDiskBytes"] == du(sleep / "memory.bin") > 0
        assert (saved["sizeBytes"], saved["active"]) == (du(sleep), True)
        rows = _rows(doc)
        assert rows["Runtimes"]["reclaimableBytes"] == rows["Checkpoints"]["reclaimableBytes"] == 0
        assert sum(rows[r]["sizeBytes"] for r in ROWS) == du(*_held_files(layout))
        volume = _items(doc, "Workspaces")
        assert len(volume) == 1
        disk = next(iter(volume.values()))["sizeBytes"] + du(cell)
        assert _column(cli, "cells", "vmcap", "DISK") == render.size(disk)
        assert _column(cli, "cells", "vmcap", "MEMORY") == \
            f"{render.size(ram)} (asleep, on disk)"

        # Awake again, then a snapshot that keeps memory: its part is its own bytes.
        assert cli("cell", "start", "vmcap", timeout=300).returncode == 0
        taken = cli("snapshot", "create", "vmcap", "--name", "warm", "--consistency",
                    "machine", timeout=300)
        assert taken.returncode == 0, taken.stderr
        [checkpoint] = list(layout.checkpoints.iterdir())  # the wake consumed the sleep's
        part = layout.machines / checkpoint.name
        meta = json.loads((checkpoint / "checkpoint.json").read_text())
        doc = _df(cli)
        warm = _items(doc, "Checkpoints")["warm"]
        assert warm["diskBytes"] == du(checkpoint, part, *_chain(layout, meta["layer"]))
        assert warm["memoryDiskBytes"] == du(part) > du(part / "ram.bin") > 0
        # Its frozen layer is under the cell's disk: deleting it frees its part and record.
        assert warm["sizeBytes"] == du(checkpoint, part)
        reclaimable = _rows(doc)["Checkpoints"]["reclaimableBytes"]
        assert reclaimable == warm["sizeBytes"]
        assert _column(cli, "snapshots", "warm", "UNIQUE") == render.size(warm["sizeBytes"])
        assert _column(cli, "snapshots", "warm", "SIZE") == render.size(warm["logicalBytes"])
        assert warm["logicalBytes"] >= warm["memoryDiskBytes"]
        running = _items(doc, "Runtimes")[cell.name]
        assert running["active"] and running["ramFileBytes"] > 0
        assert running["detail"].startswith("running")
        top = json.loads((next(layout.volumes.iterdir()) / "volume.json").read_text())["top"]
        kept = [p for p in _held_files(layout, live_top=top) if p.parent != layout.cells]
        before = du(*kept)
        gone = cli("delete", "snapshot", "warm", "--approve", timeout=300)
        assert gone.returncode == 0, gone.stderr
        assert not checkpoint.exists() and not part.exists()
        assert before - du(*[p for p in kept if p.exists()]) == reclaimable
        assert cli("delete", "cell", "vmcap", "--approve", timeout=300).returncode == 0
    finally:
        kill_machines(state_dir)
