"""Sidecars' data on the host: saved into a cell's checkpoints, filled into a fork, restored.

A sidecar's data volume (spec.sidecars[].volume) is a directory of the cell's workspace volume
(`<state>/volumes/<vol>/sidecars/<name>/`, Layout.sidecar_data), bound into the sidecar: it
lives and goes with the volume (kept across sleep, removed with the cell), and the host copies
it without the engine. A checkpoint of the cell holds a copy of each under `sidecars/<name>/`
beside its workspace tree (made while the cell and its sidecars are frozen); a fork's volume
starts with the checkpoint's, and a restore puts them back. What a sidecar wrote is the
cell's: copied as trees (treecopy: links copied as links, never followed), never read.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from devcell.backends.container.layout import Layout
from devcell.backends.host import temporaries, treecopy
from devcell.backends.host.ids import is_safe_id

DIR = "sidecars"
"""Under a volume and under a checkpoint: one directory per sidecar, by its name."""


def names(spec: dict[str, Any]) -> list[str]:
    """The sidecars of `spec` that have a data volume."""
    return [str(s["name"]) for s in spec.get("sidecars") or []
            if isinstance(s, dict) and s.get("volume") and is_safe_id(str(s.get("name", "")))]


def ensure(layout: Layout, volume_id: str, sidecar: str) -> Path:
    """The sidecar's data directory, made (empty) when missing: what its container binds."""
    path = layout.sidecar_data(volume_id, sidecar)
    for directory in (layout.sidecars(volume_id), path):
        try:
            _mkdir_shared(directory)
        except FileExistsError:
            pass
    return path


def _mkdir_shared(path: Path) -> None:
    """A new directory a sidecar's users read, 0755 whatever the process's umask
    (mkdir(0o755) was 0700 under a umask of 077)."""
    path.mkdir(mode=0o700)
    os.chmod(path, 0o755)


def _entries(root: Path, wanted: list[str]) -> list[Path]:
    """The directories under `root` named in `wanted` that are real directories (a link a
    cell left is never followed)."""
    out = []
    for name in wanted:
        path = root / name
        try:
            is_dir = os.lstat(path).st_mode & 0o170000 == 0o040000
        except FileNotFoundError:
            continue
        if is_dir:
            out.append(path)
    return out


def save(layout: Layout, volume_id: str, wanted: list[str], into: Path) -> dict[str, Any]:
    """Copy the data of the sidecars `wanted` into `into/sidecars/` (a checkpoint's
    temporary); what to add to its metadata."""
    target = into / DIR
    if target.exists():  # an earlier attempt into the same temporary
        treecopy.remove_tree(target, temporaries.trash(into))
    found = _entries(layout.sidecars(volume_id), wanted)
    if not found:
        return {}
    target.mkdir(mode=0o700)
    files = size = 0
    for source in found:
        stats = treecopy.copy_tree(source, target / source.name,
                                   description=f"sidecar {source.name}: saving its data")
        files, size = files + stats.files, size + stats.size_bytes
    return {"sidecars": [p.name for p in found], "sidecar_files": files,
            "sidecar_bytes": size}


def fill(layout: Layout, checkpoint_id: str, into: Path) -> None:
    """A new volume's sidecar data (`into`: its temporary) from the checkpoint's: a fork's
    sidecars start with the snapshot's data."""
    saved = layout.checkpoint_sidecars(checkpoint_id)
    found = _entries(saved, sorted(os.listdir(saved))) if saved.is_dir() else []
    if not found:
        return
    _mkdir_shared(into / DIR)
    for source in found:
        if is_safe_id(source.name):
            treecopy.copy_tree(source, into / DIR / source.name,
                               description=f"sidecar {source.name}: restoring its data")


def restore(layout: Layout, volume_id: str, checkpoint_id: str) -> list[str]:
    """Replace the volume's sidecar data by the checkpoint's (the cell is stopped): each
    sidecar the checkpoint saved gets its copy; one it did not save keeps its own."""
    saved = layout.checkpoint_sidecars(checkpoint_id)
    found = _entries(saved, sorted(os.listdir(saved))) if saved.is_dir() else []
    restored = []
    for source in found:
        if not is_safe_id(source.name):
            continue
        parent = layout.sidecars(volume_id)
        with contextlib.suppress(FileExistsError):
            _mkdir_shared(parent)
        tmp = parent / temporaries.temp_name(source.name)
        try:
            treecopy.copy_tree(source, tmp, description=f"sidecar {source.name}: restoring")
            current = parent / source.name
            if os.path.lexists(current):
                treecopy.remove_tree_fully(current, temporaries.trash(parent))
            os.rename(tmp, current)
        except BaseException:
            if tmp.exists():
                treecopy.remove_tree(tmp, temporaries.trash(parent))
            raise
        restored.append(source.name)
    return restored
