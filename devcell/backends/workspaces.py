"""Workspace volumes and checkpoints on the host filesystem (no engine involved).

Everything appears under its final name only when complete: a volume or checkpoint is built
in a temporary sibling directory and renamed into place, and removed by a rename to a trash
name first. So a crash never leaves a half-written checkpoint that `find` would report.

A checkpoint is a complete, immutable tree; a file unchanged since an earlier checkpoint of
the same volume is a hard link to that checkpoint's file (found by the inode, size, times and
mode recorded in the earlier checkpoint's `sources.json`, as git's index finds unchanged
files), so a checkpoint costs what changed. Links only ever join checkpoints, never a live
workspace. A fork's volume is, where the machine allows, an overlay whose lower layer is its
snapshot's checkpoint (see overlay.py); elsewhere a copy. The layout and the space each
operation costs are described in docs/backends.md.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from devcell import failpoints
from devcell.backends import overlay, temporaries, treecopy
from devcell.backends.container_layout import Layout, is_safe_id, safe_id
from devcell.errors import BackendError, BackendNotFound, BackendRefused
from devcell.log import logger

MARKER_VERSION = 1
SOURCES = "sources.json"
"""In a checkpoint: the identity of each copied file's source, read by the next checkpoint."""
RESTORED = "restored.json"
"""In a volume restored from a checkpoint (snapshot restore): that checkpoint's id and the
identity of each file the restore copied from it, so the next checkpoint links the files
still unchanged to it instead of copying them (workspace_restore.py writes it)."""
OVERLAY = "overlay"
COPY = "copy"
"""How a volume holds its files (`storage` in volume.json): an overlay on a checkpoint (a
fork), or a plain directory of its own."""


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


def _write_json(path: Path, data: dict[str, Any], *, sort_keys: bool = True) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(data, sort_keys=sort_keys))  # dumps: the C encoder
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


@dataclass(frozen=True)
class VolumeMade:
    stats: treecopy.TreeStats
    storage: str
    """OVERLAY or COPY."""
    copy_reason: str | None
    """Why a fork was copied rather than mounted on its checkpoint (None when it was not)."""


def _overlay_refusal(lower: Path, tmp: Path) -> str | None:
    """None when a fork can be an overlay on `lower` here, else why it must be a copy. Tried
    for real in the temporary directory (a kernel may refuse, e.g. an upper directory on
    another overlay), so a volume is never renamed into place with a mount that cannot work."""
    why = overlay.supported()
    if why is not None:
        return why
    if not overlay.nameable(lower, tmp):
        return "the state directory's path holds characters overlay options cannot carry"
    upper, work, target = tmp / "upper", tmp / "work", tmp / "workspace"
    _mkdir_private(work)
    target.mkdir(mode=0o755)
    upper.mkdir(mode=0o755)
    st = lower.stat()
    os.chown(upper, st.st_uid, st.st_gid)
    os.chmod(upper, stat.S_IMODE(st.st_mode))
    os.utime(upper, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:
        overlay.mount(lower=lower, upper=upper, work=work, target=target)
    except OSError as exc:
        for made in (upper, work, target):
            treecopy.remove_tree(made, temporaries.trash(tmp.parent))
        return f"the kernel refused an overlay mount ({exc.strerror})"
    failpoints.hit("storage.volume.probe-mounted")
    overlay.unmount(target)
    return None


def _filesystem_now(directory: Path) -> int:
    """The filesystem's clock now (ns), as it stamps files: a file whose mtime or ctime is
    not older may still change within the same tick without its times changing, so it is
    never recorded as a source (git's "racily clean" entries)."""
    probe = directory / ".stamp"
    probe.touch()
    try:
        return probe.stat().st_mtime_ns
    finally:
        probe.unlink()


def _write_sources(path: Path, volume_id: str,
                   sources: dict[str, tuple[int, int, int, int, int]], stamp: int) -> None:
    files = {rel: seen for rel, seen in sources.items() if seen[2] < stamp and seen[3] < stamp}
    _write_json(path, {"version": 1, "volume": volume_id, "files": files}, sort_keys=False)


def _read_sources(path: Path, volume_id: str) -> dict[str, tuple[int, ...]]:
    data = _read_json(path) or {}
    files = data.get("files")
    if data.get("volume") != volume_id or not isinstance(files, dict):
        return {}
    return {rel: tuple(seen) for rel, seen in files.items() if isinstance(seen, list)}


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
                      ) -> VolumeMade:
        safe_id("cell", cell_id)
        final = self.layout.volume(volume_id)
        if self.volume_exists(volume_id):
            self.ensure_mounted(volume_id)
            return VolumeMade(treecopy.TreeStats(0, 0), self.storage(volume_id), None)
        source = None
        meta: dict[str, Any] = {}
        if from_checkpoint is not None:
            meta = self.find_checkpoint(from_checkpoint) or {}
            if not meta:
                raise BackendNotFound(f"checkpoint {from_checkpoint} does not exist")
            source = self.layout.checkpoint(from_checkpoint) / "workspace"
        temporaries.remove_dead(self.layout.volumes, f"{temporaries.TMP}{volume_id}-")
        tmp = self.layout.volumes / temporaries.temp_name(volume_id)
        _mkdir_private(tmp)
        storage, why_copy = COPY, None
        try:
            if source is not None:
                why_copy = _overlay_refusal(source, tmp)
                if why_copy is None:
                    storage = OVERLAY
                    stats = treecopy.TreeStats(int(meta.get("files", 0)),
                                               int(meta.get("size_bytes", 0)))
                else:
                    stats = treecopy.copy_tree(
                        source, tmp / "workspace",
                        description=f"{cell_name}: restoring {from_checkpoint}")
            else:
                (tmp / "workspace").mkdir(mode=0o755)
                stats = treecopy.TreeStats(0, 0)
            _mkdir_private(tmp / "logs")
            _write_json(tmp / "volume.json", {
                "version": MARKER_VERSION, "volume": volume_id, "cell_id": cell_id,
                "cell": cell_name, "from_checkpoint": from_checkpoint, "created": time.time(),
                "operation": op_id, "storage": storage,
                "lower": from_checkpoint if storage == OVERLAY else None,
                "copy_reason": why_copy,
            })
            _clear_unmarked(final, "volume.json")  # a directory without a marker
            os.rename(tmp, final)
            _fsync_dir(self.layout.volumes)
        except BaseException:
            treecopy.remove_tree(tmp, temporaries.trash(self.layout.volumes))
            raise
        failpoints.hit("storage.volume.before-mount")
        self.ensure_mounted(volume_id)
        logger.bind(volume=volume_id).debug("volume created ({}, {} files)", storage, stats.files)
        return VolumeMade(stats, storage, why_copy)

    def storage(self, volume_id: str) -> str:
        """How the volume holds its files: OVERLAY (a fork on its checkpoint) or COPY."""
        return OVERLAY if (self.marker(volume_id) or {}).get("storage") == OVERLAY else COPY

    def lower_of(self, volume_id: str) -> str | None:
        """The checkpoint an overlay volume stands on (it must outlive the volume), or None."""
        marker = self.marker(volume_id) or {}
        return str(marker["lower"]) if marker.get("storage") == OVERLAY else None

    def checkpoints_in_use(self) -> dict[str, list[str]]:
        """Checkpoint id -> the volumes whose overlay stands on it (never to be deleted)."""
        used: dict[str, list[str]] = {}
        for volume, _ in self.all_volumes():
            lower = self.lower_of(volume)
            if lower is not None:
                used.setdefault(lower, []).append(volume)
        return used

    @_host_errors("mounting a fork's workspace")
    def ensure_mounted(self, volume_id: str) -> bool:
        """Mount an overlay volume's workspace if it is not (after a reboot, or a crash between
        creating and mounting it); whether a mount was made. Called before anything reads
        the workspace or a container is started on it: an unmounted workspace is an empty
        directory, and a cell writing there would write beside its files, not into them."""
        lower = self.lower_of(volume_id)
        target = self.layout.workspace(volume_id)
        if lower is None or overlay.is_mounted(target):
            return False
        if self.find_checkpoint(lower) is None:
            raise BackendNotFound(f"checkpoint {lower}, the lower layer of fork volume "
                                  f"{volume_id}, is gone; the fork cannot be mounted")
        overlay.mount(lower=self.layout.checkpoint(lower) / "workspace",
                      upper=self.layout.upper(volume_id),
                      work=self.layout.overlay_work(volume_id), target=target)
        return True

    @_host_errors("removing a workspace volume")
    def delete_volume(self, volume_id: str) -> None:
        overlay.unmount(self.layout.workspace(volume_id))
        failpoints.hit("storage.volume.unmounted")
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
        """Save the volume's workspace as a new checkpoint (the caller froze the writers):
        files unchanged since an earlier checkpoint are hard links to it, the rest copies."""
        existing = self.find_checkpoint(checkpoint_id)
        if existing is not None:
            return existing
        source = self.layout.workspace(volume_id)
        if not source.is_dir():
            raise BackendNotFound(f"volume {volume_id} does not exist; nothing to checkpoint")
        self.ensure_mounted(volume_id)
        final = self.layout.checkpoint(checkpoint_id)
        parent = self.layout.checkpoints
        temporaries.remove_dead(parent, f"{temporaries.TMP}{checkpoint_id}-")
        tmp = parent / temporaries.temp_name(checkpoint_id)
        _mkdir_private(tmp)
        started = time.perf_counter()
        try:
            stamp = _filesystem_now(tmp)
            base, reuse = self._reuse(volume_id)
            made = treecopy.snapshot_tree(
                source, tmp / "workspace", reuse=reuse,
                description=f"{cell_name or cell_id}: checkpoint {checkpoint_id}")
            failpoints.hit("storage.checkpoint.tree-built")
            _write_sources(tmp / SOURCES, volume_id, made.sources, stamp)
            meta = {"id": checkpoint_id, "cell_id": cell_id, "volume": volume_id,
                    "files": made.stats.files, "size_bytes": made.stats.size_bytes,
                    "created": time.time(), "base": base, "shared_files": made.reused_files,
                    "shared_bytes": made.reused_bytes,
                    "copy_ms": round((time.perf_counter() - started) * 1000, 1)}
            _write_json(tmp / "checkpoint.json", meta)
            _clear_unmarked(final, "checkpoint.json")  # no metadata: never complete
            failpoints.hit("storage.checkpoint.before-rename")
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

    def _reuse(self, volume_id: str) -> tuple[str | None, treecopy.Reuse | None]:
        """The earlier checkpoint a new checkpoint of this volume may share files with, and
        the rule that says which: for a fork on an overlay, every file its upper layer does
        not hold is its lower checkpoint's; otherwise, a file whose inode, size, times and
        mode are those recorded when the volume's latest checkpoint copied it."""
        lower = self.lower_of(volume_id)
        if lower is not None:
            below = str(self.layout.checkpoint(lower) / "workspace")
            index = overlay.UpperIndex(self.layout.upper(volume_id))
            return lower, lambda rel, st: f"{below}/{rel}" if index.unchanged(rel) else None
        previous = self.latest_checkpoint_of_volume(volume_id)
        restored = self.restored_from(volume_id, previous)
        if restored is not None:
            previous = restored
            recorded = _read_sources(self.layout.volume(volume_id) / RESTORED, volume_id)
        elif previous is None:
            return None, None
        else:
            recorded = _read_sources(self.layout.checkpoint(previous) / SOURCES, volume_id)
        if not recorded:
            return None, None
        earlier = str(self.layout.checkpoint(previous) / "workspace")

        def same(rel: str, st: os.stat_result) -> str | None:
            seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
            return f"{earlier}/{rel}" if recorded.get(rel) == seen else None
        return previous, same

    def restored_from(self, volume_id: str, latest: str | None) -> str | None:
        """The checkpoint the volume was restored from, when that restore is newer than its
        latest checkpoint and the checkpoint is still there (else None)."""
        data = _read_json(self.layout.volume(volume_id) / RESTORED) or {}
        source = data.get("checkpoint")
        if not isinstance(source, str) or not is_safe_id(source):
            return None
        meta = self.find_checkpoint(source)
        newer = latest is None or float(data.get("created", 0)) > float(
            (self.find_checkpoint(latest) or {}).get("created", 0))
        return source if meta is not None and newer else None

    def latest_checkpoint_of_volume(self, volume_id: str) -> str | None:
        """The newest complete checkpoint taken of this volume (a new one shares with it)."""
        newest: tuple[float, str] | None = None
        for entry in self.layout.checkpoints.iterdir():
            if entry.name.startswith(".") or not is_safe_id(entry.name):
                continue
            meta = self.find_checkpoint(entry.name)
            if meta is None or meta.get("volume") != volume_id:
                continue
            created = float(meta.get("created", 0))
            if newest is None or created > newest[0]:
                newest = (created, entry.name)
        return None if newest is None else newest[1]

    def content(self, kind: str, resource_id: str) -> Path | None:
        """The workspace directory of a volume (`kind` "volume") or checkpoint, if it holds
        any file: what the orphan sweep must never remove on its own."""
        if kind == "volume":
            workspace = self.layout.workspace(resource_id)
            if self.lower_of(resource_id) is not None:
                return workspace  # a fork: its snapshot's files, and its own in upper/
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
        self.ensure_mounted(volume_id)
        if checkpoint_id is None:
            checkpoint_id = (self.marker(volume_id) or {}).get("from_checkpoint")
        if checkpoint_id is None or self.find_checkpoint(checkpoint_id) is None:
            return not treecopy.is_empty(workspace)
        saved = self.layout.checkpoint(checkpoint_id) / "workspace"
        return treecopy.signature(workspace) != treecopy.signature(saved)
