"""Workspace volumes and checkpoints on the host filesystem (no engine involved).

Everything appears under its final name only when complete: a volume or checkpoint is built
in a temporary sibling directory and renamed into place, and removed by a rename to a trash
name first. So a crash never leaves a half-written checkpoint that `find` would report.

A checkpoint is an immutable tree: either complete, each file unchanged since an earlier
checkpoint of the same volume a hard link to that checkpoint's file (found by the inode, size,
times and mode recorded in the earlier checkpoint's `sources.rec`, as git's index finds
unchanged files), or, after a small change, a layer holding only what changed since the
volume's last complete tree, read whole through a read-only overlay of the two (OVER, VIEW);
either way a checkpoint costs what changed. Links only ever join checkpoints, never a live
workspace. A fork's volume is, where the machine allows, an overlay whose lower layers are its
snapshot's checkpoint (see container/overlay.py); elsewhere a copy. The layout and the space each
operation costs are described in docs/backends.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import marshal
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from devcell import failpoints
from devcell.backends.container import overlay
from devcell.backends.container.layout import Layout
from devcell.backends.host import live_folder, temporaries, treecopy, treewalk
from devcell.backends.host.ids import is_safe_id, safe_id
from devcell.errors import BackendError, BackendNotFound, BackendRefused
from devcell.log import logger
from devcell.records import Record

if TYPE_CHECKING:
    from devcell.backends.host import workspace_seed

MARKER_VERSION = 1
SOURCES = "sources.rec"
"""In a checkpoint: the identity of every entry of the workspace it saved, in walk order,
read by the next checkpoint (what to share, and whether anything changed at all). A line
naming the format, a JSON line (volume, stamp, the SHA-256 and length of the rest), then the
record in marshal's format 2: written and read in a few milliseconds where JSON took ~35 for
10,000 entries, and the SHA-256 of those bytes is the tree's TREE_DIGEST too."""
SOURCES_MAGIC = b"devcell-sources 3\n"
LEGACY_SOURCES = "sources.json"
"""The record in JSON (SOURCES_VERSION), as earlier builds wrote it; restore's record too."""
SOURCES_VERSION = 2
SAME_AS = "same_as"
"""In checkpoint.json: the checkpoint whose tree this one is (nothing changed in between)."""
RETIRED = "retired.json"
"""A deleted checkpoint whose tree others still name: checkpoint.json renamed to this, so it
is no checkpoint any more, and its tree stays until the last one naming it is deleted."""
TREE_DIGEST = "tree_digest"
"""In checkpoint.json: treecopy.digest_of(record_bytes) of the walk its tree was saved from, when that walk
can vouch for every entry (none racily clean); a later walk with the same digest found
exactly that tree: nothing changed."""
OVER = "over"
"""In checkpoint.json: the checkpoint whose full tree this one's tree is a layer over (its
tree holds only what changed since that one; the merged view is mounted at VIEW)."""
LAYER = "layer.json"
"""Beside a layer's tree: the paths it holds itself, which the next checkpoint links from
it (every other path lies in the full tree below)."""
LAYER_VERSION = 1
WHITEOUTS = "whiteouts"
"""In checkpoint.json: how many character devices 0/0 the tree holds (a fork of it is then a
copy: an overlay would hide them)."""
VIEW = "view"
VIEW_LOCK = ".view.lock"
"""Beside VIEW: readers of the view hold it shared; the last one unmounts the view."""
"""In a layer's checkpoint directory: the read-only overlay of its tree over the full tree,
mounted when something reads the checkpoint whole (fork copy, restore, export)."""
LOCK = ".checkpoints.lock"
"""In images/: serialises naming a tree (a new alias) against removing it (a delete)."""
RESTORED = "restored.json"
"""In a volume restored from a checkpoint (snapshot restore): that checkpoint's id and, in the
SOURCES format, the identity of each file the restore copied from its tree, so the next
checkpoint links the files still unchanged to that tree instead of copying them
(container/workspace_restore.py writes it)."""
OVERLAY = "overlay"
COPY = "copy"
LIVE = live_folder.STORAGE
"""How a volume holds its files (`storage` in volume.json): an overlay on a checkpoint (a
fork), a plain directory of its own, or none at all: its workspace is a host folder bound
live (host/live_folder.py), recorded as LIVE_PATH, which DevCell reads but never writes."""
LIVE_PATH = live_folder.MARKER_KEY


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


def _mkdir_shared(path: Path) -> None:
    """A new directory a cell's users read (a workspace's top), 0755 whatever the process's
    umask (mkdir(0o755) was 0700 under a umask of 077)."""
    path.mkdir(mode=0o700)
    os.chmod(path, 0o755)


def _write_json(path: Path, data: dict[str, Any], *, sort_keys: bool = True,
                durable: bool = True) -> None:
    """Write `path` whole or not at all; `durable=False` when the caller syncs the whole
    filesystem before anything names the file (one syncfs instead of one fsync per file)."""
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(data, sort_keys=sort_keys))  # dumps: the C encoder
        out.flush()
        if durable:
            os.fsync(out.fileno())
    os.rename(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def fsync_dir(path: Path) -> None:
    """Make the entries of directory `path` (a rename, a new name) durable."""
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


class VolumeMade(Record):
    """A workspace volume just made: its size, how it is stored, why it is a copy."""

    stats: treecopy.TreeStats
    storage: str
    """OVERLAY, COPY or LIVE."""
    copy_reason: str | None
    """Why a fork was copied rather than mounted on its checkpoint (None when it was not)."""


def _overlay_refusal(lowers: list[Path], tmp: Path) -> str | None:
    """None when a fork can be an overlay on `lower` here, else why it must be a copy. Tried
    for real in the temporary directory (a kernel may refuse, e.g. an upper directory on
    another overlay), so a volume is never renamed into place with a mount that cannot work."""
    why = overlay.supported()
    if why is not None:
        return why
    if not overlay.nameable(*lowers, tmp):
        return "the state directory's path holds characters overlay options cannot carry"
    upper, work, target = tmp / "upper", tmp / "work", tmp / "workspace"
    _mkdir_private(work)
    _mkdir_shared(target)
    upper.mkdir(mode=0o755)
    st = lowers[0].stat()
    os.chown(upper, st.st_uid, st.st_gid)
    os.chmod(upper, stat.S_IMODE(st.st_mode))
    os.utime(upper, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:
        overlay.mount(lower=lowers, upper=upper, work=work, target=target)
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


class Sources(Record):
    """What a checkpoint recorded of the workspace it saved (its `sources.rec`)."""

    entries: list[treecopy.Entry]
    """The identity of every entry, in walk order (treecopy.Scan.record)."""
    stamp: int
    """The filesystem's clock when the walk began: an entry whose mtime or ctime is not older
    may have changed again within that tick unseen (git's "racily clean" entries)."""

    def files(self) -> dict[str, treecopy.Entry]:
        """Relative path -> identity, of each regular file the record vouches for (not
        racily clean). A file with several names is shared only when all of them are
        (treecopy._plan_linked), so links within the workspace stay links."""
        stamp, ifmt, ifreg = self.stamp, stat.S_IFMT(0o777777), stat.S_IFREG
        try:  # no conversions: one pass over 10,000 entries is a few milliseconds
            found: dict[Any, treecopy.Entry] = {
                e[0]: e for e in self.entries
                if e[5] & ifmt == ifreg and e[3] < stamp and e[4] < stamp}  # type: ignore[operator]
        except (TypeError, ValueError, IndexError):  # a damaged record vouches for nothing
            return {}
        return found if all(isinstance(path, str) for path in found) else {}

    def regular(self) -> dict[str, tuple[object, ...]]:
        """Relative path -> (inode, size, mtime, ctime, mode) of every regular file recorded,
        whatever its link count: what the approval gates compare the workspace with."""
        try:
            return {str(e[0]): tuple(e[1:6]) for e in self.entries
                    if stat.S_ISREG(int(e[5]))}
        except (TypeError, ValueError, IndexError):
            return {}


def _write_sources(path: Path, volume_id: str, record: list[treecopy.Entry],
                   stamp: int, payload: bytes | None = None,
                   digest: str | None = None) -> str | None:
    """Write the record (`payload`: treecopy.record_bytes of it, and `digest` their
    digest_of, if the caller made them: ~1 MB hashed once, not twice);
    the digest of the whole tree when the record can vouch for all of it (no entry racily
    clean: see Sources.stamp), which the next checkpoint compares its own walk with to find
    that nothing changed, else None."""
    body = treecopy.record_bytes(record) if payload is None else payload
    whole = treecopy.digest_of(body) if payload is None or digest is None else digest
    header = json.dumps({"volume": volume_id, "stamp": stamp, "sha256": whole,
                         "bytes": len(body)}).encode()
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:  # made durable by the caller's syncfs
        out.write(SOURCES_MAGIC + header + b"\n" + body)
    os.rename(tmp, path)
    newest = max([e[3] for e in record] + [e[4] for e in record], default=stamp)
    clean = int(newest) < stamp
    return whole if clean else None


def _read_sources(path: Path, volume_id: str) -> Sources | None:
    """The record, or None when there is none usable (absent, damaged, an older format, or
    another volume's): the next checkpoint is then a full copy, never a wrong one. The
    bytes are checked against their SHA-256 before marshal reads them."""
    try:
        with open(path, "rb") as source:
            data = source.read()
    except FileNotFoundError:
        if path.name != SOURCES:
            return None
        return _read_legacy_sources(path.with_name(LEGACY_SOURCES), volume_id)
    except OSError:
        return None
    if not data.startswith(SOURCES_MAGIC):
        return _read_legacy_sources(path, volume_id)  # restore's record, in JSON
    line, _, body = data[len(SOURCES_MAGIC):].partition(b"\n")
    try:
        header = json.loads(line)
        if (not isinstance(header, dict) or header.get("volume") != volume_id
                or header.get("bytes") != len(body)
                or header.get("sha256") != treecopy.digest_of(body)):
            return None
        entries, stamp = marshal.loads(body), header.get("stamp")
    except (ValueError, EOFError, TypeError):
        return None
    if not isinstance(entries, list) or not isinstance(stamp, int):
        return None
    return Sources(entries, stamp)


def _read_legacy_sources(path: Path, volume_id: str) -> Sources | None:
    data = _read_json(path) or {}
    entries, stamp = data.get("entries"), data.get("stamp")
    if (data.get("version") != SOURCES_VERSION or data.get("volume") != volume_id
            or not isinstance(entries, list) or not isinstance(stamp, int)):
        return None
    return Sources(entries, stamp)


def _count_whiteouts(source: Path, found: treecopy.Scan) -> int:
    """How many of the tree's entries are character devices 0/0 (what overlay reads as a
    deleted file; the scan has no device numbers, so each character device is asked)."""
    if found.deep:
        return 1  # not walked by entry: unknown, so counted
    count = 0
    ifmt, ifchr = stat.S_IFMT(0o777777), stat.S_IFCHR
    for entry in found.entries:  # a comparison each (10,000 entries: a millisecond)
        if entry[5] & ifmt == ifchr:  # type: ignore[operator]
            try:
                count += os.lstat(f"{source}/{entry[0]}").st_rdev == 0
            except OSError:
                count += 1  # cannot tell: counted, so a fork of it is a copy
    return count


class WorkspaceStore:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._readers: dict[str, int] = {}
        """Layer holder -> a descriptor of its VIEW_LOCK, held shared while this store reads
        through its view (release_view lets it go)."""
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
                      from_checkpoint: str | None, op_id: str | None = None,
                      seed: workspace_seed.Seed | None = None,
                      live: live_folder.LiveFolder | None = None,
                      extra: Callable[[Path], object] | None = None) -> VolumeMade:
        """A new workspace volume: empty, a checkpoint's tree (a fork), `seed` filled into
        it, or a host folder bound `live` (only recorded: the volume holds no tree); made in
        a temporary and renamed into place, so a failure leaves none. `extra` fills more of
        the temporary (its directory) before the rename: a fork's sidecar data."""
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
            source = self.layers_of(from_checkpoint)
        temporaries.remove_dead(self.layout.volumes, f"{temporaries.TMP}{volume_id}-")
        tmp = self.layout.volumes / temporaries.temp_name(volume_id)
        _mkdir_private(tmp)
        storage, why_copy = COPY, None
        try:
            if source is not None:
                why_copy = self._whiteouts_refusal(str(from_checkpoint)) or _overlay_refusal(
                    source, tmp)
                if why_copy is None:
                    storage = OVERLAY
                    stats = treecopy.TreeStats(int(meta.get("files", 0)),
                                               int(meta.get("size_bytes", 0)))
                else:
                    stats = treecopy.copy_tree(
                        self.tree_of(str(from_checkpoint)), tmp / "workspace",
                        description=f"{cell_name}: restoring {from_checkpoint}")
            elif live is not None:
                storage = LIVE
                found = treecopy.scan(Path(live.path))
                stats = treecopy.TreeStats(found.files, found.size)
            elif seed is not None:  # its modules (git, archives) only here
                from devcell.backends.archives import unpack as archive_unpack
                from devcell.backends.host import workspace_seed

                if isinstance(seed, workspace_seed.ArchiveSource):
                    archive_unpack.unpack(seed, tmp / "workspace")
                else:
                    workspace_seed.fill(seed, tmp / "workspace", cell_name=cell_name)
                found = treecopy.scan(tmp / "workspace")
                stats = treecopy.TreeStats(found.files, found.size)
            else:
                _mkdir_shared(tmp / "workspace")
                stats = treecopy.TreeStats(0, 0)
            _mkdir_private(tmp / "logs")
            if extra is not None:
                extra(tmp)
            _write_json(tmp / "volume.json", {
                "version": MARKER_VERSION, "volume": volume_id, "cell_id": cell_id,
                "cell": cell_name, "from_checkpoint": from_checkpoint, "created": time.time(),
                "operation": op_id, "storage": storage,
                "lower": from_checkpoint if storage == OVERLAY else None,
                "copy_reason": why_copy,
                LIVE_PATH: live.path if live is not None else None,
            })
            _clear_unmarked(final, "volume.json")  # a directory without a marker
            os.rename(tmp, final)
            fsync_dir(self.layout.volumes)
        except BaseException:
            treecopy.remove_tree(tmp, temporaries.trash(self.layout.volumes))
            raise
        failpoints.hit("storage.volume.before-mount")
        self.ensure_mounted(volume_id)
        logger.bind(volume=volume_id).debug("volume created ({}, {} files)", storage, stats.files)
        return VolumeMade(stats, storage, why_copy)

    def _whiteouts_refusal(self, checkpoint_id: str) -> str | None:
        """Why a fork of this checkpoint must be a copy because of its own files: one holds a
        character device 0/0 (a cell can make one), which overlay reads as a deleted file,
        so an overlay on it would not show it."""
        count = self._tree_meta(self.holder_of(checkpoint_id)).get(WHITEOUTS)
        if isinstance(count, int) and count > 0:
            return (f"the snapshot holds {count} character device(s) 0/0, which an overlay "
                    "would show as deleted files")
        return None

    def storage(self, volume_id: str) -> str:
        """How the volume holds its files: OVERLAY (a fork on its checkpoint), LIVE (a host
        folder) or COPY."""
        storage = (self.marker(volume_id) or {}).get("storage")
        return storage if storage in (OVERLAY, LIVE) else COPY

    def live_path(self, volume_id: str) -> Path | None:
        """The host folder a LIVE volume's workspace is (None for any other volume)."""
        return live_folder.recorded(self.marker(volume_id))

    def workspace_dir(self, volume_id: str) -> Path:
        """Where the volume's workspace is read on the host: its own directory, or the
        host folder of a LIVE volume."""
        return self.live_path(volume_id) or self.layout.workspace(volume_id)

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
        overlay.mount(lower=self.layers_of(lower),
                      upper=self.layout.upper(volume_id),
                      work=self.layout.overlay_work(volume_id), target=target)
        return True

    @_host_errors("removing a workspace volume")
    def delete_volume(self, volume_id: str) -> None:
        overlay.unmount(self.layout.workspace(volume_id))
        failpoints.hit("storage.volume.unmounted")
        treecopy.remove_tree_fully(self.layout.volume(volume_id),
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

    def _checkpoint_temp(self, checkpoint_id: str) -> tuple[Path, Path, Path]:
        """(final path, its parent, a new private temporary beside it) for a checkpoint about
        to be made, once the temporaries dead makings of the same id left are removed."""
        final = self.layout.checkpoint(checkpoint_id)
        parent = self.layout.checkpoints
        temporaries.remove_dead(parent, f"{temporaries.TMP}{checkpoint_id}-")
        tmp = parent / temporaries.temp_name(checkpoint_id)
        _mkdir_private(tmp)
        return final, parent, tmp

    def find_checkpoint(self, checkpoint_id: str) -> dict[str, Any] | None:
        """The metadata of a complete checkpoint, or None."""
        meta = _read_json(self.layout.checkpoint(checkpoint_id) / "checkpoint.json")
        if meta is None or meta.get("id") != checkpoint_id:
            return None
        return meta

    @_host_errors("taking a checkpoint")
    def checkpoint(self, *, checkpoint_id: str, cell_id: str, volume_id: str,
                   cell_name: str | None = None,
                   extra: Callable[[Path], dict[str, Any]] | None = None,
                   frozen: bool = False) -> dict[str, Any]:
        """Save the volume's workspace as a new checkpoint (the caller froze the writers):
        files unchanged since an earlier checkpoint are hard links to it, the rest copies;
        when nothing at all changed since the volume's latest checkpoint, the new one names
        that checkpoint's tree (SAME_AS) instead of linking every file again. `extra` saves
        more into the checkpoint's temporary directory before its rename (the sidecars'
        data: a copy each time, never an alias), returning what to add to its metadata.
        `frozen`: every process that may write the workspace is frozen (or stopped) for the
        whole call, as the container backend's checkpoint makes sure (a host folder bound
        live is never taken for frozen: the host's processes write it as they like)."""
        existing = self.find_checkpoint(checkpoint_id)
        if existing is not None:
            return existing
        source = self.workspace_dir(volume_id)
        if not source.is_dir():
            raise BackendNotFound(f"volume {volume_id} (its workspace {source}) does not "
                                  "exist; nothing to checkpoint")
        self.ensure_mounted(volume_id)
        final, parent, tmp = self._checkpoint_temp(checkpoint_id)
        started = time.perf_counter()
        frozen = frozen and self.live_path(volume_id) is None
        try:
            # Writeback write-protects the pages of a shared mapping, so the next write
            # through one faults and moves the file's mtime and ctime; a page left writable
            # takes writes no stat sees, and a later walk would call the file unchanged
            # (share it, or name this tree with SAME_AS): mmap writes lost. So every
            # checkpoint that makes a tree writes the dirty pages back (one syncfs, which
            # also makes its copies durable) while the writers are frozen, and a walk finds
            # every page written through a mapping since the latest checkpoint moved its
            # file's times (mmap writes after the freeze fault again). With writers that
            # were never frozen (a live folder, a caller that did not say), the writeback
            # comes before the walk too, so the walk sees the faults taken before it.
            # With frozen writers, a walk that finds nothing changed proves no page went
            # writable since that writeback: the checkpoint naming the tree needs none
            # (bench/checkpoint_phases.py: a syncfs takes 2-30 ms on a quiet disk, far
            # more when other writers share the filesystem).
            if not frozen:
                treecopy.sync_filesystem(source)
            stamp = _filesystem_now(tmp)  # before the walk: see Sources.stamp
            found = treecopy.scan(source)
            # One listing of every checkpoint's record (checkpoints of all volumes share the
            # directory): the share and the alias below are judged against the same latest.
            latest = None if self.lower_of(volume_id) is not None else \
                self.latest_checkpoint_of_volume(volume_id)
            base, tree, recorded = self._previous(latest, volume_id)
            meta, whole, payload = None, None, None
            if base is not None and recorded is not None:
                payload = treecopy.record_bytes(found.record)  # once: the new record's too
                whole = treecopy.digest_of(payload)
            if base is not None and whole is not None and whole == recorded:
                meta = self._alias(tmp, final, checkpoint_id=checkpoint_id, cell_id=cell_id,
                                   volume_id=volume_id, base=base, tree=tree, found=found,
                                   started=started, extra=extra)
            if meta is None:
                meta = self._build(tmp, final, source, checkpoint_id=checkpoint_id,
                                   cell_id=cell_id, volume_id=volume_id, found=found,
                                   stamp=stamp, started=started, cell_name=cell_name,
                                   payload=payload, digest=whole, extra=extra, latest=latest)
        except BaseException:
            treecopy.remove_tree(tmp, temporaries.trash(parent))
            raise
        return meta

    def _alias(self, tmp: Path, final: Path, *, checkpoint_id: str, cell_id: str,
               volume_id: str, base: str, tree: str | None, found: treecopy.Scan,
               started: float, extra: Callable[[Path], dict[str, Any]] | None = None
               ) -> dict[str, Any] | None:
        """A checkpoint that names the tree of `tree` (nothing changed since `base`, the
        volume's latest checkpoint, which is `tree` or names it): its checkpoint.json only.
        None when that tree is gone meanwhile (a concurrent delete): then a copy is made."""
        parent = self.layout.checkpoints
        with self._locked():
            if tree is None or not self._holds_tree(tree):
                return None
            added = extra(tmp) if extra is not None else {}
            meta = {"id": checkpoint_id, "cell_id": cell_id, "volume": volume_id,
                    "files": found.files, "size_bytes": found.size, "created": time.time(),
                    "base": base, SAME_AS: tree, "shared_files": found.files,
                    "shared_bytes": found.size, **added,
                    "copy_ms": round((time.perf_counter() - started) * 1000, 1)}
            # the sidecars' data, copied just now, reaches the disk with its record (one
            # syncfs); alone, the record's own fsync is enough
            _write_json(tmp / "checkpoint.json", meta, durable=extra is None)
            if extra is not None:
                treecopy.sync_filesystem(tmp)
            _clear_unmarked(final, "checkpoint.json")  # no metadata: never complete
            failpoints.hit("storage.checkpoint.before-rename")
            os.rename(tmp, final)
            fsync_dir(parent)
        return meta

    def _build(self, tmp: Path, final: Path, source: Path, *, checkpoint_id: str,
               cell_id: str, volume_id: str, found: treecopy.Scan, stamp: int,
               started: float, cell_name: str | None,
               payload: bytes | None = None, digest: str | None = None,
               extra: Callable[[Path], dict[str, Any]] | None = None,
               latest: str | None) -> dict[str, Any]:
        """A checkpoint with a tree of its own: links to the earlier checkpoint's files where
        they did not change, copies of the rest. Crash-safe by one syncfs: the copies, the
        links and the records reach the disk before the rename makes the checkpoint
        complete (no fsync per file), and the rename itself is made durable after.
        `latest`: the volume's latest checkpoint as `checkpoint` found it (None: a fork's,
        or none taken)."""
        parent = self.layout.checkpoints
        base, reuse = self._reuse(volume_id, latest)
        description = f"{cell_name or cell_id}: checkpoint {checkpoint_id}"
        over, made = None, None
        if isinstance(reuse, treecopy.Earlier) and reuse.record is not None:
            over = self._full_tree_below(reuse)
            if over is not None:
                made = treecopy.checkpoint_layer(source, tmp / "workspace", reuse, found,
                                               description=description)
        if made is None or made.held is None:
            over = None
            made = treecopy.checkpoint_tree(source, tmp / "workspace", reuse=reuse,
                                          scanned=found, description=description)
        else:
            _write_json(tmp / LAYER, {"version": LAYER_VERSION, OVER: over,
                                      "held": made.held}, sort_keys=False, durable=False)
        failpoints.hit("storage.checkpoint.tree-built")
        whole = _write_sources(tmp / SOURCES, volume_id, found.record, stamp, payload, digest)
        whiteouts = _count_whiteouts(source, found)
        added = extra(tmp) if extra is not None else {}
        meta = {**added, "id": checkpoint_id, "cell_id": cell_id, "volume": volume_id,
                "files": made.stats.files, "size_bytes": made.stats.size_bytes,
                "created": time.time(), "base": base, "shared_files": made.reused_files,
                "shared_bytes": made.reused_bytes, TREE_DIGEST: whole,
                **({OVER: over} if over is not None else {}),
                **({WHITEOUTS: whiteouts} if whiteouts else {}),
                "copy_ms": round((time.perf_counter() - started) * 1000, 1)}
        _write_json(tmp / "checkpoint.json", meta, durable=False)
        treecopy.sync_filesystem(tmp)
        with self._locked() if over is not None else contextlib.nullcontext():
            if over is not None and not self._holds_tree(over):
                raise BackendError(f"checkpoint {over}, the full tree checkpoint "
                                   f"{checkpoint_id} was a layer over, was deleted meanwhile; "
                                   "take the snapshot again")
            _clear_unmarked(final, "checkpoint.json")  # no metadata: never complete
            failpoints.hit("storage.checkpoint.before-rename")
            os.rename(tmp, final)
            fsync_dir(parent)
        return meta

    def _full_tree_below(self, earlier: treecopy.Earlier) -> str | None:
        """The checkpoint holding the full tree a new layer would lie over (that of `earlier`,
        or the one below it when it is a layer itself), or None when no layer can be made
        here (no overlay to read it back through)."""
        if overlay.supported() is not None:
            return None
        below = Path(earlier.below if earlier.below is not None else earlier.root)
        home = below.parent
        if (below.name != "workspace" or home.parent != self.layout.checkpoints
                or not is_safe_id(home.name) or not overlay.nameable(below)):
            return None
        return home.name

    # -- trees named by several checkpoints --------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Held while a tree is named by a new checkpoint or a checkpoint is removed, so a
        tree is never removed between a new checkpoint's check that it is there and the
        rename that names it (an flock: released by the kernel if the process dies)."""
        fd = os.open(self.layout.checkpoints.parent / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _holds_tree(self, checkpoint_id: str) -> bool:
        """Whether this directory holds a tree: a checkpoint's own, or a retired one's."""
        home = self.layout.checkpoint(checkpoint_id)
        return (home / "workspace").is_dir() and (
            self.find_checkpoint(checkpoint_id) is not None or (home / RETIRED).is_file())

    def holder_of(self, checkpoint_id: str) -> str:
        """The checkpoint whose directory holds this one's tree: itself, or the one it names
        (SAME_AS: nothing changed between them)."""
        meta = self.find_checkpoint(checkpoint_id) or {}
        named = meta.get(SAME_AS)
        return str(named) if isinstance(named, str) and is_safe_id(named) else checkpoint_id

    def _tree_meta(self, tree: str) -> dict[str, Any]:
        """The metadata of the checkpoint holding a tree, retired or not."""
        return (self.find_checkpoint(tree)
                or _read_json(self.layout.checkpoint(tree) / RETIRED) or {})

    def over_of(self, tree: str) -> str | None:
        """The full tree a tree holder's own tree is a layer over, or None (a full tree)."""
        over = self._tree_meta(tree).get(OVER)
        return str(over) if isinstance(over, str) and is_safe_id(over) else None

    def layers_of(self, checkpoint_id: str) -> list[Path]:
        """The directories a checkpoint's files lie in, uppermost first: its tree, and for a
        layer the full tree below it (an overlay's lower directories)."""
        holder = self.holder_of(checkpoint_id)
        over = self.over_of(holder)
        top = self.layout.checkpoint(holder) / "workspace"
        return [top] if over is None else [top, self.layout.checkpoint(over) / "workspace"]

    def tree_of(self, checkpoint_id: str) -> Path:
        """Where a checkpoint's files are, whole: its own workspace/, or that of the
        checkpoint whose tree it names (nothing changed between them); for a layer, the
        read-only merged view of it over its full tree (mounted here if it is not). Every
        reader goes through here; only links (which cannot cross into the view) go by
        layers_of and earlier()."""
        holder = self.holder_of(checkpoint_id)
        layers = self.layers_of(holder)
        if len(layers) == 1:
            return layers[0]
        view = self.layout.checkpoint(holder) / VIEW
        self._read_lock(holder)
        if overlay.is_mounted(view):
            return view
        with self._locked():
            if not overlay.is_mounted(view):
                if not layers[1].is_dir():
                    raise BackendNotFound(f"checkpoint {holder} is a layer over {layers[1]}, "
                                          "which is gone; its files cannot be read")
                with contextlib.suppress(FileExistsError):
                    os.mkdir(view, 0o700)
                try:
                    overlay.mount_view(lowers=layers, target=view)
                except OSError as exc:
                    raise BackendError(
                        f"checkpoint {holder} holds only what changed since checkpoint "
                        f"{layers[1].parent.name}, read through an overlay mount, which this "
                        f"machine refused ({exc.strerror}); DevCell must run as root on a "
                        "kernel with overlay to read it") from None
        return view

    def _read_lock(self, holder: str) -> None:
        """A shared lock on the holder's VIEW_LOCK, so release_view in another process leaves
        the view mounted while this one reads through it."""
        if holder in self._readers:
            return
        fd = os.open(self.layout.checkpoint(holder) / VIEW_LOCK,
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._readers[holder] = fd

    def release_view(self, checkpoint_id: str) -> None:
        """The read of a checkpoint through its view (tree_of) is over: the view is unmounted
        unless another reader still holds it (whose release unmounts it then). Left mounted,
        a retired checkpoint's view outlived every export until the last snapshot over it
        was deleted, and `rm -rf` of a state directory failed on it."""
        holder = self.holder_of(checkpoint_id)
        fd = self._readers.pop(holder, None)
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no other reader anywhere
        except BlockingIOError:
            os.close(fd)
            return
        try:
            overlay.unmount(self.layout.checkpoint(holder) / VIEW)
        finally:
            os.close(fd)

    def earlier(self, checkpoint_id: str, known: dict[str, treecopy.Entry],
                sources: Sources | None = None) -> treecopy.Earlier:
        """The tree of a checkpoint as a new one shares with it: files linked from the layer
        that really holds each (its own tree, or for a layer the full tree below)."""
        holder = self.holder_of(checkpoint_id)
        root = str(self.layout.checkpoint(holder) / "workspace")
        over = self.over_of(holder)
        record, stamp = (sources.entries, sources.stamp) if sources is not None else (None, 0)
        if over is None:
            return treecopy.Earlier(root, known, record=record, stamp=stamp)
        layer = _read_json(self.layout.checkpoint(holder) / LAYER) or {}
        held = layer.get("held")
        if layer.get("version") != LAYER_VERSION or layer.get(OVER) != over or not isinstance(
                held, list) or not all(isinstance(path, str) for path in held):
            # which paths the layer holds is unknown: nothing can be linked from it
            return treecopy.Earlier(root, {}, record=None)
        return treecopy.Earlier(root, known, below=str(self.layout.checkpoint(over) / "workspace"),
                                held=frozenset(held), record=record, stamp=stamp)

    def freed_by_deleting(self, checkpoint_id: str) -> list[Path]:
        """The directories deleting this checkpoint would remove (what `devcell gc` and the
        capacity figures measure): none while others name its tree (it is only retired);
        with the last name of a retired tree, that tree too."""
        meta = self.find_checkpoint(checkpoint_id)
        home = self.layout.checkpoint(checkpoint_id)
        if meta is None:
            return []
        if not isinstance(meta.get(SAME_AS), str) and self._naming(checkpoint_id):
            return []
        freed, going = [home], checkpoint_id
        # then each retired tree kept only by what goes: the tree it names, the full tree
        # below a layer
        for key in (SAME_AS, OVER):
            up = meta.get(key)
            while isinstance(up, str) and is_safe_id(up):
                holder = self.layout.checkpoint(up)
                if not (holder / RETIRED).is_file() or self._naming(up) != [going]:
                    break
                freed.append(holder)
                going, up = up, self.over_of(up)
        return freed

    def _naming(self, tree: str) -> list[str]:
        """What keeps `tree` (a checkpoint's directory) alive: the complete checkpoints that
        name it as theirs, and the trees (checkpoints' or retired) that are layers over it."""
        named = []
        for entry in self.layout.checkpoints.iterdir():
            if entry.name.startswith(".") or not is_safe_id(entry.name) or entry.name == tree:
                continue
            meta = self.find_checkpoint(entry.name)
            if meta is None:
                meta = _read_json(entry / RETIRED) if (entry / RETIRED).is_file() else None
                if meta is not None and meta.get(OVER) == tree:
                    named.append(entry.name)
            elif meta.get(SAME_AS) == tree or meta.get(OVER) == tree:
                named.append(entry.name)
        return named

    def checkpoint_files(self, checkpoint_id: str) -> Path:
        """Where a complete checkpoint's tree lies, to read (export); BackendNotFound if none."""
        if self.find_checkpoint(checkpoint_id) is None:
            raise BackendNotFound(f"checkpoint {checkpoint_id} does not exist")
        return self.tree_of(checkpoint_id)

    @_host_errors("importing a checkpoint")
    def import_checkpoint(self, *, checkpoint_id: str, cell_id: str,
                          fill: Callable[..., tuple[int, int]], sidecars: bool = False
                          ) -> dict[str, Any]:
        """A new complete checkpoint whose tree `fill` writes (snapshot import): built in a
        temporary sibling and renamed into place only once `fill` returned, as `checkpoint`
        does, so a refused or interrupted import leaves nothing under the checkpoint's id.
        With `sidecars`, fill is also given where the sidecars' data goes (`sidecars=`)."""
        existing = self.find_checkpoint(checkpoint_id)
        if existing is not None:
            raise BackendRefused(f"checkpoint {checkpoint_id} already exists")
        final, parent, tmp = self._checkpoint_temp(checkpoint_id)
        started = time.perf_counter()
        try:
            if sidecars:
                files, size = fill(tmp / "workspace", sidecars=tmp / "sidecars")
            else:
                files, size = fill(tmp / "workspace")
            meta = {"id": checkpoint_id, "cell_id": cell_id, "volume": None, "files": files,
                    "size_bytes": size, "created": time.time(), "imported": True,
                    "copy_ms": round((time.perf_counter() - started) * 1000, 1)}
            _write_json(tmp / "checkpoint.json", meta)
            _clear_unmarked(final, "checkpoint.json")
            os.rename(tmp, final)
            fsync_dir(parent)
        except BaseException:
            treecopy.remove_tree(tmp, temporaries.trash(parent))
            raise
        return meta

    def _previous(self, previous: str | None, volume_id: str
                  ) -> tuple[str | None, str | None, str | None]:
        """For a volume of its own (not a fork on an overlay), given its latest checkpoint
        (latest_checkpoint_of_volume; None for a fork): that checkpoint, the checkpoint
        holding its tree, and that tree's TREE_DIGEST (or None)."""
        if previous is None:
            return None, None, None
        named = (self.find_checkpoint(previous) or {}).get(SAME_AS)
        tree = str(named) if isinstance(named, str) and is_safe_id(named) else previous
        holder = self.find_checkpoint(tree) or _read_json(
            self.layout.checkpoint(tree) / RETIRED) or {}
        whole = holder.get(TREE_DIGEST)
        same_volume = holder.get("volume") == volume_id
        return previous, tree, whole if isinstance(whole, str) and same_volume else None

    def _reuse(self, volume_id: str, latest: str | None
               ) -> tuple[str | None, treecopy.Reuse | None]:
        """The earlier checkpoint a new checkpoint of this volume may share files with, and
        the rule that says which: for a fork on an overlay, every file its upper layer does
        not hold is its lower checkpoint's; otherwise, a file whose inode, size, times and
        mode are those recorded when the volume's latest checkpoint (`latest`, as
        latest_checkpoint_of_volume found it) saved it."""
        lower = self.lower_of(volume_id)
        if lower is not None:
            file = self.earlier(lower, {}).file
            index = overlay.UpperIndex(self.layout.upper(volume_id))
            return lower, lambda rel, _: file(rel) if index.unchanged(rel) else None
        restored = self.restored_from(volume_id, latest)
        if restored is not None:  # restored since its latest checkpoint: share with that tree
            sources = _read_sources(self.layout.volume(volume_id) / RESTORED, volume_id)
            recorded = sources.files() if sources is not None else {}
            return (restored, self.earlier(restored, recorded)) if recorded else (None, None)
        previous, tree, _ = self._previous(latest, volume_id)
        sources = None if tree is None else _read_sources(
            self.layout.checkpoint(tree) / SOURCES, volume_id)
        recorded = sources.files() if sources is not None else {}
        if previous is None or tree is None or not recorded:
            return None, None
        return previous, self.earlier(tree, recorded, sources)

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
        any file: what the orphan sweep must never remove on its own. For a layer, its own
        tree or the full one below it (never a view to mount)."""
        if kind == "volume":
            if self.lower_of(resource_id) is not None:
                # a fork: its snapshot's files, and its own in upper/
                return self.layout.workspace(resource_id)
            places = [self.layout.workspace(resource_id)]
        else:
            places = self.layers_of(resource_id)
        for workspace in places:
            try:
                if not treecopy.is_empty(workspace):
                    return workspace
            except FileNotFoundError:
                continue
            except OSError:  # unreadable, or not a directory: it is not ours to judge empty
                return workspace
        return None

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
        """Remove a checkpoint. One whose tree other checkpoints name is retired instead
        (checkpoint.json renamed to RETIRED, one atomic step): it is no checkpoint any more,
        and its tree goes with the last checkpoint naming it. A retired tree that nothing
        names (left by a kill between the two) is removed here too, by any later delete."""
        parent = self.layout.checkpoints
        doomed: list[Path] = []
        with self._locked():
            home = self.layout.checkpoint(checkpoint_id)
            meta = self.find_checkpoint(checkpoint_id)
            if meta is not None and SAME_AS not in meta and self._naming(checkpoint_id):
                os.rename(home / "checkpoint.json", home / RETIRED)
                fsync_dir(home)
            elif (home / RETIRED).is_file():
                pass  # deleted before (a retry): its tree goes with the last one naming it
            elif home.exists() or home.is_symlink():
                doomed.append(temporaries.trash(parent))
                os.rename(home, doomed[-1])
            failpoints.hit("storage.checkpoint.retire")
            removed = True
            while removed:  # a retired layer gone may leave the full tree below it unnamed
                removed = False
                for entry in parent.iterdir():
                    if ((entry / RETIRED).is_file() and is_safe_id(entry.name)
                            and not self._naming(entry.name)):
                        doomed.append(temporaries.trash(parent))
                        os.rename(entry, doomed[-1])
                        removed = True
            if doomed:
                fsync_dir(parent)
        for trash in doomed:  # outside the lock: removing a big tree takes a while
            treecopy.remove_tree_fully(trash, temporaries.trash(parent))

    def changed_since(self, volume_id: str, checkpoint_id: str | None) -> bool:
        """Whether the workspace holds changes the checkpoint does not (size/mtime/mode check).

        With no checkpoint, a fork is compared with the checkpoint it was restored from; any
        other non-empty workspace counts as changed. A host folder bound live never does:
        its changes stay in the folder whatever happens to the cell, so none is lost.
        """
        if self.live_path(volume_id) is not None:
            return False
        workspace = self.layout.workspace(volume_id)
        if not workspace.is_dir():
            return False
        self.ensure_mounted(volume_id)
        if checkpoint_id is None:
            checkpoint_id = (self.marker(volume_id) or {}).get("from_checkpoint")
        if checkpoint_id is None or self.find_checkpoint(checkpoint_id) is None:
            return not treecopy.is_empty(workspace)
        saved = self.tree_of(checkpoint_id)
        if treecopy.signature(workspace) != treecopy.signature(saved):
            return True
        return bool(self.rewritten_since(volume_id, checkpoint_id, first=True))

    def _recorded(self, volume_id: str, checkpoint_id: str) -> dict[str, tuple[object, ...]]:
        """The identity of each workspace file as it was when it matched `checkpoint_id`:
        the restore record when the volume was restored from it (the files are the
        restore's copies), else the sources that checkpoint's tree was saved from, when they
        are this volume's; else nothing (only size, mtime and mode can then be compared)."""
        volume = self.layout.volume(volume_id)
        if (_read_json(volume / RESTORED) or {}).get("checkpoint") == checkpoint_id:
            sources = _read_sources(volume / RESTORED, volume_id)
        else:
            sources = _read_sources(self.tree_of(checkpoint_id).parent / SOURCES, volume_id)
        return sources.regular() if sources is not None else {}

    def rewritten_since(self, volume_id: str, checkpoint_id: str, *,
                        first: bool = False) -> set[str]:
        """The workspace's regular files that look as `checkpoint_id` saved them (size, mtime,
        mode) but are not the files recorded then: rewritten with their size and mtime put
        back (cp -p, tar, rsync -t), which only the inode or ctime tells, as the next
        checkpoint tells it. For a fork against the checkpoint below it, every regular file
        of its upper layer (copied up: written, truncated, its metadata changed, or made
        again). `first`: stop at the first one."""
        found: set[str] = set()
        if self.lower_of(volume_id) == checkpoint_id:
            walked, recorded = self.layout.upper(volume_id), None
        else:
            walked, recorded = self.workspace_dir(volume_id), self._recorded(
                volume_id, checkpoint_id)
            if not recorded:
                return found
        for directory in treewalk.walk(walked):
            base = directory.path()
            for name, st in directory.entries:
                if not stat.S_ISREG(st.st_mode):
                    continue
                rel = f"{base}/{name}" if base else name
                if recorded is not None:
                    seen = recorded.get(rel)
                    if seen is None or seen == (st.st_ino, st.st_size, st.st_mtime_ns,
                                                st.st_ctime_ns, st.st_mode):
                        continue
                found.add(rel)
                if first:
                    return found
        return found
