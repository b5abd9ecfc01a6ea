"""Workspace volumes and checkpoints on the host filesystem (no engine involved).

Everything appears under its final name only when complete: a volume or checkpoint is built
in a temporary sibling directory and renamed into place, and removed by a rename to a trash
name first. So a crash never leaves a half-written checkpoint that `find` would report.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from devcell.backends import temporaries, treecopy
from devcell.backends.container_layout import Layout, is_safe_id, safe_id
from devcell.errors import BackendError, BackendNotFound, BackendRefused
from devcell.log import logger

MARKER_VERSION = 1


P = ParamSpec("P")
R = TypeVar("R")


def _host_errors(action: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A host file system failure (disk full, read-only) is a step's BackendError naming the
    cause, never an unexpected OSError with a traceback."""
    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except OSError as exc:
                where = f" ({exc.filename})" if exc.filename else ""
                raise BackendError(f"{action} failed: {exc.strerror or exc}{where}") from exc
        return wrapped
    return wrap


def _mkdir_private(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.rename(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _clear_unmarked(final: Path, marker: str) -> None:
    """Make way for a new volume or checkpoint at `final`, where a directory without its
    marker stands (it can only be a leftover: DevCell renames complete ones into place).
    An empty one is removed; one whose workspace holds files is refused, never removed
    without a decision: the marker may be what was lost."""
    if not final.exists() and not final.is_symlink():
        return
    workspace = final / "workspace"
    try:
        holds_files = not final.is_symlink() and not treecopy.is_empty(workspace)
    except FileNotFoundError:
        holds_files = False
    except OSError:
        holds_files = True
    if holds_files:
        raise BackendRefused(
            f"{final} holds files (in workspace/) but no {marker}: DevCell will not remove "
            "them on its own; move the directory out of the state directory (after copying "
            "what matters) and try again")
    treecopy.remove_tree(final, temporaries.trash(final.parent))


class WorkspaceStore:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        for path in (layout.state_dir, layout.volumes, layout.checkpoints.parent,
                     layout.checkpoints, layout.containers):
            _mkdir_private(path)

    # -- volumes ---------------------------------------------------------------------------

    def volume_exists(self, volume_id: str) -> bool:
        return self.layout.marker(volume_id).is_file()

    def marker(self, volume_id: str) -> dict[str, Any] | None:
        return _read_json(self.layout.marker(volume_id))

    @_host_errors("creating a workspace volume")
    def create_volume(self, *, cell_id: str, cell_name: str, volume_id: str,
                      from_checkpoint: str | None, op_id: str | None = None
                      ) -> treecopy.TreeStats:
        safe_id("cell", cell_id)
        final = self.layout.volume(volume_id)
        if self.volume_exists(volume_id):
            return treecopy.TreeStats(0, 0)
        source = None
        if from_checkpoint is not None:
            if self.find_checkpoint(from_checkpoint) is None:
                raise BackendNotFound(f"checkpoint {from_checkpoint} does not exist")
            source = self.layout.checkpoint(from_checkpoint) / "workspace"
        temporaries.remove_dead(self.layout.volumes, f"{temporaries.TMP}{volume_id}-")
        tmp = self.layout.volumes / temporaries.temp_name(volume_id)
        _mkdir_private(tmp)
        try:
            if source is not None:
                stats = treecopy.copy_tree(source, tmp / "workspace",
                                           description=f"{cell_name}: restoring {from_checkpoint}")
            else:
                (tmp / "workspace").mkdir(mode=0o755)
                stats = treecopy.TreeStats(0, 0)
            _mkdir_private(tmp / "logs")
            _write_json(tmp / "volume.json", {
                "version": MARKER_VERSION, "volume": volume_id, "cell_id": cell_id,
                "cell": cell_name, "from_checkpoint": from_checkpoint, "created": time.time(),
                "operation": op_id,
            })
            _clear_unmarked(final, "volume.json")  # a directory without a marker
            os.rename(tmp, final)
            _fsync_dir(self.layout.volumes)
        except BaseException:
            treecopy.remove_tree(tmp, temporaries.trash(self.layout.volumes))
            raise
        logger.bind(volume=volume_id).debug("volume created ({} files restored)", stats.files)
        return stats

    @_host_errors("removing a workspace volume")
    def delete_volume(self, volume_id: str) -> None:
        treecopy.remove_tree(self.layout.volume(volume_id),
                             temporaries.trash(self.layout.volumes))

    def all_volumes(self) -> list[tuple[str, str]]:
        """(volume id, owning cell id) of every complete volume, from the marker files."""
        found = []
        for entry in sorted(self.layout.volumes.iterdir()):
            if entry.name.startswith(".") or not is_safe_id(entry.name):
                continue
            marker = _read_json(entry / "volume.json")
            if marker and marker.get("volume") == entry.name and marker.get("cell_id"):
                found.append((entry.name, str(marker["cell_id"])))
        return found

    def volumes_of(self, cell_id: str) -> list[str]:
        safe_id("cell", cell_id)
        return [volume for volume, owner in self.all_volumes() if owner == cell_id]

    # -- checkpoints ----------------------------------------------------------------------

    def find_checkpoint(self, checkpoint_id: str) -> dict[str, Any] | None:
        """The metadata of a complete checkpoint, or None."""
        meta = _read_json(self.layout.checkpoint(checkpoint_id) / "checkpoint.json")
        if meta is None or meta.get("id") != checkpoint_id:
            return None
        return meta

    @_host_errors("taking a checkpoint")
    def checkpoint(self, *, checkpoint_id: str, cell_id: str, volume_id: str,
                   cell_name: str | None = None) -> dict[str, Any]:
        """Copy the volume's workspace to a new checkpoint (the caller froze the writers)."""
        existing = self.find_checkpoint(checkpoint_id)
        if existing is not None:
            return existing
        source = self.layout.workspace(volume_id)
        if not source.is_dir():
            raise BackendNotFound(f"volume {volume_id} does not exist; nothing to checkpoint")
        final = self.layout.checkpoint(checkpoint_id)
        parent = self.layout.checkpoints
        temporaries.remove_dead(parent, f"{temporaries.TMP}{checkpoint_id}-")
        tmp = parent / temporaries.temp_name(checkpoint_id)
        _mkdir_private(tmp)
        started = time.perf_counter()
        try:
            stats = treecopy.copy_tree(
                source, tmp / "workspace",
                description=f"{cell_name or cell_id}: checkpoint {checkpoint_id}")
            meta = {"id": checkpoint_id, "cell_id": cell_id, "volume": volume_id,
                    "files": stats.files, "size_bytes": stats.size_bytes, "created": time.time(),
                    "copy_ms": round((time.perf_counter() - started) * 1000, 1)}
            _write_json(tmp / "checkpoint.json", meta)
            _clear_unmarked(final, "checkpoint.json")  # no metadata: never complete
            os.rename(tmp, final)
            _fsync_dir(parent)
        except BaseException:
            treecopy.remove_tree(tmp, temporaries.trash(parent))
            raise
        return meta

    def checkpoint_files(self, checkpoint_id: str) -> Path:
        """Where a complete checkpoint's tree lies, to read (export); BackendNotFound if none."""
        if self.find_checkpoint(checkpoint_id) is None:
            raise BackendNotFound(f"checkpoint {checkpoint_id} does not exist")
        return self.layout.checkpoint(checkpoint_id) / "workspace"

    @_host_errors("importing a checkpoint")
    def import_checkpoint(self, *, checkpoint_id: str, cell_id: str,
                          fill: Callable[[Path], tuple[int, int]]) -> dict[str, Any]:
        """A new complete checkpoint whose tree `fill` writes (snapshot import): built in a
        temporary sibling and renamed into place only once `fill` returned, as `checkpoint`
        does, so a refused or interrupted import leaves nothing under the checkpoint's id."""
        existing = self.find_checkpoint(checkpoint_id)
        if existing is not None:
            raise BackendRefused(f"checkpoint {checkpoint_id} already exists")
        final = self.layout.checkpoint(checkpoint_id)
        parent = self.layout.checkpoints
        temporaries.remove_dead(parent, f"{temporaries.TMP}{checkpoint_id}-")
        tmp = parent / temporaries.temp_name(checkpoint_id)
        _mkdir_private(tmp)
        started = time.perf_counter()
        try:
            files, size = fill(tmp / "workspace")
            meta = {"id": checkpoint_id, "cell_id": cell_id, "volume": None, "files": files,
                    "size_bytes": size, "created": time.time(), "imported": True,
                    "copy_ms": round((time.perf_counter() - started) * 1000, 1)}
            _write_json(tmp / "checkpoint.json", meta)
            _clear_unmarked(final, "checkpoint.json")
            os.rename(tmp, final)
            _fsync_dir(parent)
        except BaseException:
            treecopy.remove_tree(tmp, temporaries.trash(parent))
            raise
        return meta

    def content(self, kind: str, resource_id: str) -> Path | None:
        """The workspace directory of a volume (`kind` "volume") or checkpoint, if it holds
        any file: what the orphan sweep must never remove on its own."""
        if kind == "volume":
            workspace = self.layout.workspace(resource_id)
        else:
            workspace = self.layout.checkpoint(resource_id) / "workspace"
        try:
            return None if treecopy.is_empty(workspace) else workspace
        except FileNotFoundError:
            return None
        except OSError:  # unreadable, or not a directory: it is not ours to judge empty
            return workspace

    def all_checkpoints(self) -> list[tuple[str, str]]:
        """(checkpoint id, cell id it was taken of) of every complete checkpoint."""
        found = []
        for entry in sorted(self.layout.checkpoints.iterdir()):
            if entry.name.startswith(".") or not is_safe_id(entry.name):
                continue
            meta = self.find_checkpoint(entry.name)
            if meta is not None:
                found.append((entry.name, str(meta.get("cell_id", ""))))
        return found

    @_host_errors("removing a checkpoint")
    def delete_checkpoint(self, checkpoint_id: str) -> None:
        treecopy.remove_tree(self.layout.checkpoint(checkpoint_id),
                             temporaries.trash(self.layout.checkpoints))

    def changed_since(self, volume_id: str, checkpoint_id: str | None) -> bool:
        """Whether the workspace holds changes the checkpoint does not (size/mtime/mode check).

        With no checkpoint, a fork is compared with the checkpoint it was restored from; any
        other non-empty workspace counts as changed.
        """
        workspace = self.layout.workspace(volume_id)
        if not workspace.is_dir():
            return False
        if checkpoint_id is None:
            checkpoint_id = (self.marker(volume_id) or {}).get("from_checkpoint")
        if checkpoint_id is None or self.find_checkpoint(checkpoint_id) is None:
            return not treecopy.is_empty(workspace)
        saved = self.layout.checkpoint(checkpoint_id) / "workspace"
        return treecopy.signature(workspace) != treecopy.signature(saved)
