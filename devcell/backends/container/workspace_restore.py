"""Restoring a volume's workspace to a checkpoint in place (`devcell snapshot restore`).

The restored tree is built beside the live one, in a temporary directory that names its owner
process, then swapped in by one `renameat2(RENAME_EXCHANGE)`: at every instant the volume's
path holds either the whole old tree or the whole restored one, so a kill -9 can never leave
a mix. The old tree lands in the temporary directory and is removed with it (recovery removes
it if the process died first); the caller took the safety snapshot before.

The restored files are copies of the checkpoint's (`cp -a`, in parallel batches), never hard
links to it: a checkpoint is immutable and the workspace is the cell's to write, so sharing
an inode would let the next write in place change the snapshot.

A volume that is an overlay fork keeps standing on its own lower checkpoint; what changes is
its upper layer. Restored to that very checkpoint (throwing away what the fork changed), the
new upper layer is empty: instant, whatever the size. Restored to any other checkpoint, the
new upper layer is made by the kernel itself, on a private overlay mount of the same lower
layer: everything removed (whiteouts), then the checkpoint's tree copied in (opaque
directories), so the merged view is exactly that tree. The fork's overlay is then unmounted,
its `upper/` exchanged for the new one, and mounted again.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from devcell import failpoints, names
from devcell.backends.base import Changes
from devcell.backends.container import overlay, workspaces
from devcell.backends.container.workspaces import WorkspaceStore
from devcell.backends.host import children, live_folder, temporaries, treecopy, treewalk
from devcell.errors import BackendError, BackendNotFound, BackendRefused

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}
EXAMPLES = 10
"""Paths named in a summary of changes (the rest are counted)."""
EXAMPLE_CHARS = 120
_RM_BATCH = 200


@dataclass(frozen=True)
class Restored:
    files: int
    bytes: int
    storage: str
    """How the volume holds its files (workspaces.COPY, or OVERLAY for a fork)."""
    how: str
    """"copy" (a new tree), "upper-reset" (a fork back to its own lower layer: nothing
    copied) or "upper-rebuilt" (a fork given another checkpoint's tree in its upper layer)."""


def exchange(a: Path, b: Path) -> None:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE); OSError if the kernel cannot."""
    libc = ctypes.CDLL(None, use_errno=True)
    args = (_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        result = fn(*args)
    else:  # glibc before 2.28 has no wrapper
        number = _SYS_RENAMEAT2.get(platform.machine())
        if number is None:
            raise OSError(38, "renameat2 is not available on this machine")
        result = libc.syscall(number, *args)
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"exchanging {a} and {b}: {os.strerror(code)}")


def restore(store: WorkspaceStore, volume_id: str, checkpoint_id: str) -> Restored:
    """Make the volume's workspace exactly the checkpoint's tree (the cell not running)."""
    layout = store.layout
    if not store.volume_exists(volume_id):
        raise BackendNotFound(f"volume {volume_id} does not exist; nothing to restore into")
    live = store.live_path(volume_id)
    if live is not None:  # api/restore.py refuses first; this holds for any other caller
        raise BackendRefused(live_folder.RESTORE_REFUSED.format(folder=live))
    source = store.checkpoint_files(checkpoint_id)  # BackendNotFound when incomplete or gone
    meta = store.find_checkpoint(checkpoint_id) or {}
    temporaries.remove_dead(layout.volumes, f"{temporaries.TMP}{volume_id}-restore-")
    tmp = layout.volumes / temporaries.temp_name(f"{volume_id}-restore")
    tmp.mkdir(mode=0o700)
    try:
        lower = store.lower_of(volume_id)
        if lower is None:
            made = _restore_copy(store, volume_id, checkpoint_id, source, tmp)
        else:
            made = _restore_upper(store, volume_id, lower, checkpoint_id, source, tmp)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise BackendError(f"restoring checkpoint {checkpoint_id} into volume {volume_id} "
                           f"failed: {exc.strerror or exc}{where}; the workspace is as it "
                           "was") from None
    finally:
        treecopy.remove_tree(tmp, temporaries.trash(layout.volumes))
        store.release_view(checkpoint_id)  # the source read through a view: let it go
    if made.how != "copy":
        return Restored(int(meta.get("files", 0)), int(meta.get("size_bytes", 0)),
                        made.storage, made.how)
    return made


def _restore_copy(store: WorkspaceStore, volume_id: str, checkpoint_id: str, source: Path,
                  tmp: Path) -> Restored:
    stats = treecopy.copy_tree(source, tmp / "workspace",
                               description=f"restoring {checkpoint_id}")
    copied = _identities(tmp / "workspace", tmp)
    failpoints.hit("storage.restore.tree-built")
    record = store.layout.volume(volume_id) / workspaces.RESTORED
    record.unlink(missing_ok=True)  # it names the old tree's files
    exchange(tmp / "workspace", store.layout.workspace(volume_id))
    workspaces.fsync_dir(store.layout.volume(volume_id))
    failpoints.hit("storage.restore.exchanged")
    stamp, entries = copied
    _write_record(record, {"version": workspaces.SOURCES_VERSION, "volume": volume_id,
                           "checkpoint": checkpoint_id, "created": time.time(),
                           "stamp": stamp, "entries": entries})
    return Restored(stats.files, stats.size_bytes, "copy", "copy")


def _write_record(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(data))
        out.flush()
        os.fsync(out.fileno())
    os.rename(tmp, path)


def _identities(root: Path, scratch: Path) -> tuple[int, list[list[object]]]:
    """The filesystem's clock now, and the identity of each single-link regular file just
    copied, as a checkpoint's record holds them (in JSON: workspaces.LEGACY_SOURCES): only
    files whose times are older than that clock (one that changes within the same tick could not be told
    apart; the cell is stopped, so nothing writes meanwhile)."""
    time.sleep(0.01)  # past the coarse clock tick the last copy was stamped in
    probe = scratch / ".stamp"
    probe.touch()
    stamp = probe.stat().st_mtime_ns
    probe.unlink()
    found: list[list[object]] = []
    for directory in treewalk.walk(root):
        base = directory.path()
        for name, st in directory.entries:
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and \
                    st.st_mtime_ns < stamp and st.st_ctime_ns < stamp:
                found.append([f"{base}/{name}" if base else name, st.st_ino, st.st_size,
                              st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_nlink])
    return stamp, found


def _restore_upper(store: WorkspaceStore, volume_id: str, lower: str, checkpoint_id: str,
                   source: Path, tmp: Path) -> Restored:
    layout = store.layout
    below = store.layers_of(lower)  # its tree, and for a layer the full tree under it
    upper, work = tmp / "upper", tmp / "work"
    upper.mkdir(mode=0o755)
    work.mkdir(mode=0o700)
    _copy_root_attributes(below[0], upper)
    how = "upper-reset"
    if checkpoint_id != lower:
        how = "upper-rebuilt"
        merged = tmp / "merged"
        merged.mkdir(mode=0o700)
        overlay.mount(lower=below, upper=upper, work=work, target=merged)
        try:
            _replace_contents(merged, source)
        finally:
            overlay.unmount(merged)
    failpoints.hit("storage.restore.tree-built")
    workspace = layout.workspace(volume_id)
    overlay.unmount(workspace)
    exchange(upper, layout.upper(volume_id))
    workspaces.fsync_dir(layout.volume(volume_id))
    failpoints.hit("storage.restore.exchanged")
    store.ensure_mounted(volume_id)
    return Restored(0, 0, "overlay", how)


def _copy_root_attributes(src: Path, dst: Path) -> None:
    st = os.lstat(src)
    os.chown(dst, st.st_uid, st.st_gid)
    os.chmod(dst, stat.S_IMODE(st.st_mode))
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def _replace_contents(merged: Path, source: Path) -> None:
    """Through the private overlay: remove every entry (the kernel writes whiteouts), then
    copy the checkpoint's tree in with `cp -a` (directories where lower ones were removed
    become opaque), root attributes included."""
    names = sorted(os.listdir(merged))
    for start in range(0, len(names), _RM_BATCH):
        batch = [str(merged / n) for n in names[start:start + _RM_BATCH]]
        done = children.run(["rm", "-rf", "--one-file-system", "--", *batch])
        if done.returncode != 0:
            raise BackendError(f"clearing the fork's view failed: {done.stderr.strip()[:300]}")
    done = children.run(["cp", "-a", "--", f"{source}/.", f"{merged}/"])
    if done.returncode != 0:
        raise BackendError(f"copying {source} failed: {done.stderr.strip()[:300]}")


# -- what would be replaced -------------------------------------------------------------------

Entry = tuple[str, int, int, int]
"""(type, size, mtime_ns, mode) of one path: what `rsync` compares by default."""


def _entries(root: Path) -> dict[str, Entry]:
    found: dict[str, Entry] = {}
    for directory in treewalk.walk(root):
        base = directory.path()
        for name, st in directory.entries:
            kind = "d" if stat.S_ISDIR(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else "o"
            size, mtime = (0, 0) if kind == "d" else (st.st_size, st.st_mtime_ns)
            found[f"{base}/{name}" if base else name] = (kind, size, mtime, st.st_mode)
    return found


def changes(workspace: Path, saved: Path | None,
            rewritten: frozenset[str] = frozenset()) -> Changes:
    """How `workspace` differs from `saved` (None: from nothing), first paths by name.
    `rewritten`: paths that look as saved but are other files (WorkspaceStore.rewritten_since):
    changed too."""
    now = _entries(workspace)
    before = _entries(saved) if saved is not None else {}
    added = sorted(p for p in now if p not in before)
    removed = sorted(p for p in before if p not in now)
    changed = sorted(p for p in now if p in before and (now[p] != before[p] or p in rewritten))
    examples = ([f"+{p}" for p in added[:EXAMPLES]] + [f"~{p}" for p in changed[:EXAMPLES]]
                + [f"-{p}" for p in removed[:EXAMPLES]])[:EXAMPLES]
    # The names are the cell's: escaped (no control character reaches a terminal or a log
    # line) and cut short, whatever the cell called its files.
    shown = tuple(_short(names.printable(e)) for e in examples)
    return Changes(len(added), len(changed), len(removed), shown)


def _short(text: str) -> str:
    return text if len(text) <= EXAMPLE_CHARS else text[:EXAMPLE_CHARS - 3] + "..."
