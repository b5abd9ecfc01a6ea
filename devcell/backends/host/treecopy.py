"""Copy, measure, compare and remove directory trees (the workspace's files).

The copy keeps what `cp -a` keeps (modes, owners, times, extended attributes and ACLs,
symbolic links, hard links, special files) and uses GNU cp to do it, with `--reflink=auto` so
filesystems that can share blocks (btrfs, XFS) do. It is parallel: on ext4 and similar, most of
the time of copying many small files goes into creating them, one directory lock at a time, so
the files are copied in per-directory batches by several `cp` processes at once (different
directories do not contend), after the directories are made; the directories get their
attributes last, deepest first, so copying into them does not disturb their times. Files with
several hard links are copied by one `cp` call, which keeps them linked.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from devcell import progress
from devcell.backends.host import filecopy, treewalk
from devcell.errors import BackendError
from devcell.log import logger
from devcell.records import MutableRecord, Record, field

BATCH = 256
"""Files per `cp` call: one directory's files, split into batches of at most this many."""
LINK_BATCH = 2048
"""Files per hard-linking task (a thread each: link(2) releases the interpreter lock)."""
SERIAL_BELOW = 64
"""Trees with fewer files are copied by one `cp -a` (starting processes would cost more)."""
CP = ("cp", "-a", "--reflink=auto", "--no-target-directory")


class TreeStats(Record):
    """The entries and bytes of a tree that was copied or saved."""

    files: int
    """Entries that are not directories (regular files, symbolic links, ...)."""
    size_bytes: int
    """Total size of the regular files."""


Entry = list[str | int]
"""The identity of one entry of a tree, as the next checkpoint compares it: [relative path
("" for the root), inode, size, mtime_ns, ctime_ns, mode, link count]. A list, not a tuple, so
a whole scan compares equal to the same record read back from JSON in one C-level `==`."""


class Scan(MutableRecord):
    """One walk of a tree (lstat of every entry, no link followed): what copying, sharing and
    the "nothing changed" check need, so the tree is walked once per checkpoint."""

    dirs: list[tuple[str, os.stat_result]] = field(default_factory=list)
    """Every directory below the root (relative path, its stat), parents before children."""
    entries: list[Entry] = field(default_factory=list)
    """The identity of every entry that is not a directory, in walk order (the same lists as
    in `record`: no second object per file)."""
    record: list[Entry] = field(default_factory=list)
    """The identity of the root, every directory and every entry, in walk order."""
    files: int = 0
    size: int = 0
    deep: bool = False
    """Some path is longer than LONG_PATH, or the tree holds more than MAX_RECORD entries:
    the lists above are empty, copy it whole."""
    longest: int = 0
    """Bytes of the longest relative path."""


class _Plan(MutableRecord):
    """How a tree's files are made: copied in batches, or linked to an earlier copy."""

    batches: list[list[str]] = field(default_factory=list)
    batch_bytes: list[int] = field(default_factory=list)
    """Bytes of regular files in each batch (for progress)."""
    linked: list[str] = field(default_factory=list)
    """Files with more than one hard link: copied together so their links survive."""
    linked_bytes: int = 0
    reused: list[tuple[str, str]] = field(default_factory=list)
    """(relative path, earlier checkpoint's file) of files hard-linked instead of copied."""
    reused_bytes: int = 0
    layer: bool = False
    """A layer over the earlier tree's full tree: files unchanged there are left out."""
    held: list[str] = field(default_factory=list)
    """In a layer: every path it holds (directories, then files), for its layer.json."""
    dirs: list[str] = field(default_factory=list)
    """In a layer: the directories it makes (parents first)."""


class Earlier(Record):
    """An earlier, immutable tree and what it was saved from: a regular file whose identity
    now is the one recorded (inode, size, mtime, ctime, mode, one link) is that tree's file
    at the same path. One dict lookup and one C-level list comparison per file."""

    root: str
    known: dict[str, Entry]
    """Relative path -> recorded identity, of the files the record vouches for only."""
    below: str | None = None
    """When `root` is a layer (a checkpoint holding only what changed since the full tree
    below it): that full tree, where every path `held` does not name lies."""
    held: frozenset[str] = frozenset()
    """The paths the layer `root` holds itself (directories and files)."""
    record: list[Entry] | None = None
    """Every entry the tree was saved from, in walk order: what a new layer over the same
    full tree checks for deletions and changes of type. None: no layer can be made."""
    stamp: int = 0
    """The filesystem's clock when that walk began (see workspaces.Sources.stamp)."""

    def file(self, rel: str) -> str:
        """The real file (not a merged view: links cannot cross filesystems) at `rel`."""
        if self.below is None or rel in self.held:
            return f"{self.root}/{rel}"
        return f"{self.below}/{rel}"


Reuse = Callable[[str, Entry], str | None] | Earlier
"""Given a regular file's relative path and identity, an identical immutable file to hard-link
in its place (from an earlier checkpoint), or None to copy it; or an Earlier tree."""


PATH_MAX = 4096
LONG_PATH = 2048
"""Bytes of a relative path past which a tree is copied by one `cp -a` (which walks by
descriptors) instead of batches of paths handed to `cp` (which fail past PATH_MAX)."""
MAX_RECORD = 250_000
"""Entries a scan keeps identities of (about 1 KB each with the record it is compared to):
past this a tree is counted only and copied whole, so a cell that fills its workspace with a
million empty files costs the host a full copy, not a gigabyte of memory per checkpoint."""
BATCH_BYTES = 64 * 2**20
"""A batch is closed past this many bytes too, so a few big files still copy in parallel."""


def _identity(rel: str, st: os.stat_result) -> Entry:
    return [rel, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode,
            st.st_nlink]


_IFMT, _IFDIR, _IFREG, _IFLNK = 0o170000, stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK
_INO, _SIZE, _MODE, _LINKS = 1, 2, 5, 6
"""Where an Entry holds the inode, the size, the mode and the link count."""


def scan(root: Path) -> Scan:
    """Walk `root` once (treewalk: no recursion, no link followed, one filesystem).

    The loop over the entries is the whole cost of an unchanged checkpoint after the lstat
    calls themselves, so each directory is listed here, in one pass (treewalk's lister):
    one list per entry (its identity, shared by `record` and `entries`), and the totals left
    to one pass at the end."""
    found = Scan()
    for _ in treewalk.walk(root, functools.partial(_scan_listing, found)):
        pass
    if not found.deep:
        found.files, found.size = _totals(found.entries)
    return found


def _scan_listing(found: Scan, fd: int, device: int, directory: treewalk.Directory
                  ) -> list[str]:
    """One directory of `scan`: its entries added to the scan (lstat each, as treewalk's
    own listing); the subdirectories to enter (on the root's device), last first."""
    record = found.record
    if directory.parent is None:
        record.append(_identity("", directory.st))
    with os.scandir(fd) as listing:
        listed = list(listing)
    subdirs: list[str] = []
    if not listed:
        return subdirs
    # a character is at most 4 bytes: only a directory holding a name this long needs
    # its names encoded to know whether a path passed LONG_PATH
    widest = directory.path_bytes + 4 * max(len(e.name) for e in listed) + 1
    if found.deep or widest > LONG_PATH:
        directory.entries = _lstat_each(listed)
        subdirs = [name for name, st in directory.entries
                   if st.st_mode & _IFMT == _IFDIR and st.st_dev == device]
        _scan_long(found, directory)
        directory.entries = []
    else:
        found.longest = max(found.longest, widest)  # an upper bound, below LONG_PATH
        rel = directory.path()
        prefix = f"{rel}/" if rel else ""
        add, add_file, dirs = record.append, found.entries.append, found.dirs.append
        for item in listed:  # one lstat each (fstatat): the kind comes from it, not d_type
            try:
                st = item.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed while we listed
                continue
            mode = st.st_mode
            entry: Entry = [prefix + item.name, st.st_ino, st.st_size, st.st_mtime_ns,
                            st.st_ctime_ns, mode, st.st_nlink]
            add(entry)
            if mode & _IFMT == _IFDIR:
                dirs((entry[0], st))  # type: ignore[arg-type]
                if st.st_dev == device:
                    subdirs.append(item.name)
            else:
                add_file(entry)
        if len(record) > MAX_RECORD:
            _count_only(found)
    subdirs.reverse()  # popped from the end: entered in listing order
    return subdirs


def _lstat_each(listed: list[os.DirEntry[str]]) -> list[tuple[str, os.stat_result]]:
    found = []
    for item in listed:
        try:
            found.append((item.name, item.stat(follow_symlinks=False)))
        except FileNotFoundError:
            continue
    return found


def _totals(files: list[Entry]) -> tuple[int, int]:
    """The number of entries and the bytes of the regular files among them."""
    size: int = sum([e[_SIZE] for e in files  # type: ignore[misc]
                     if e[_MODE] & _IFMT == _IFREG])  # type: ignore[operator]
    return len(files), size


def _count_only(found: Scan) -> None:
    """From here on the scan counts: what was walked so far is totalled and let go."""
    found.deep = True
    found.files, found.size = _totals(found.entries)
    found.dirs.clear()
    found.entries.clear()
    found.record.clear()


def _scan_long(found: Scan, directory: treewalk.Directory) -> None:
    """`scan` of one directory holding a long name: byte lengths counted exactly, and past
    LONG_PATH the walk only counts (`deep`)."""
    rel = "" if found.deep else directory.path()
    prefix = f"{rel}/" if rel else ""
    for name, st in directory.entries:
        length = directory.path_bytes + len(os.fsencode(name)) + 1
        found.longest = max(found.longest, length)
        if length > LONG_PATH and not found.deep:
            _count_only(found)  # paths are no use any more
        is_dir = stat.S_ISDIR(st.st_mode)
        if found.deep:
            if not is_dir:
                found.files += 1
                found.size += st.st_size if stat.S_ISREG(st.st_mode) else 0
            continue
        path = prefix + name
        entry = _identity(path, st)
        found.record.append(entry)
        if is_dir:
            found.dirs.append((path, st))
        else:
            found.entries.append(entry)


def record_bytes(record: list[Entry]) -> bytes:
    """A walk's record as bytes, to store and to tell "exactly the same tree" by their digest
    (digest_of) without reading the recorded one back: marshal format 2 has no
    back-references, so equal records give equal bytes. Only ever compared with a digest
    this code made."""
    return marshal.dumps(record, 2)


def digest_of(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def _plan(found: Scan, reuse: Reuse | None, *, layer: bool = False) -> _Plan:
    """Which files are linked to an earlier checkpoint's, which copied, in which batches.

    A batch may span directories: after a small change the few changed files of many
    directories go to one `cp`, not one process per directory; a directory's files still
    start a batch of their own when the previous one is already worth a process.
    `layer` (reuse an Earlier): plan a layer over its full tree instead, which leaves out
    each file unchanged there (see plan_layer)."""
    plan = _Plan(layer=layer)
    batch: list[str] = []
    batch_size = 0
    last_dir = ""
    earlier = reuse if isinstance(reuse, Earlier) else None
    known = earlier.known if earlier is not None else {}
    held = earlier.held if earlier is not None and earlier.below is not None else frozenset()
    ask = None if reuse is None or isinstance(reuse, Earlier) else reuse
    names: dict[int, list[tuple[str, int, bool]]] = {}
    """Inode -> (path, size, recorded unchanged) of each name of a file with several links."""
    for entry in found.entries:  # [path, ino, size, mtime, ctime, mode, links]: no conversions
        path: str = entry[0]  # type: ignore[assignment]
        mode: int = entry[_MODE]  # type: ignore[assignment]
        size: int = entry[_SIZE] if mode & _IFMT == _IFREG else 0  # type: ignore[assignment]
        if ask is not None and mode & _IFMT == _IFREG:
            # Asked before the link count: a fork's file served from its lower checkpoint has
            # that checkpoint's links (to the checkpoints it shares with, to its own other
            # names); linking each name to the lower file at that path keeps them as they
            # are there.
            same = ask(path, entry)
            if same is not None:
                plan.reused.append((path, same))
                plan.reused_bytes += size
                continue
        if entry[_LINKS] > 1:  # type: ignore[operator]
            names.setdefault(entry[_INO], []).append(  # type: ignore[arg-type]
                (path, size, bool(known) and known.get(path) == entry))
            continue
        if known and known.get(path) == entry:  # only regular files are known
            if layer and path not in held:
                continue  # the full tree below holds it
            plan.reused.append((path, earlier.file(path)))  # type: ignore[union-attr]
            plan.reused_bytes += size
            continue
        here = path.rpartition("/")[0]
        if batch and (len(batch) >= BATCH or batch_size >= BATCH_BYTES
                      or (here != last_dir and len(batch) >= BATCH // 8)):
            plan.batches.append(batch)
            plan.batch_bytes.append(batch_size)
            batch, batch_size = [], 0
        last_dir = here
        batch.append(path)
        batch_size += size
    if batch:
        plan.batches.append(batch)
        plan.batch_bytes.append(batch_size)
    _plan_linked(plan, names, found, earlier, held)
    return plan


def _plan_linked(plan: _Plan, names: dict[int, list[tuple[str, int, bool]]], found: Scan,
                 earlier: Earlier | None, held: frozenset[str]) -> None:
    """A file with several names in the workspace is shared with the earlier tree when every
    one of its links is a name here and each is recorded unchanged (the earlier tree holds
    those names as one file, so linking each to it keeps them one; a layer leaves them out
    when its full tree holds them all, and shares them only when its earlier layer holds
    them all); otherwise all its names are copied by one `cp`, which keeps them linked."""
    links = {e[_INO]: e[_LINKS] for e in found.entries if e[_LINKS] > 1}  # type: ignore[operator]
    for inode, group in names.items():
        whole = len(group) == links[inode] and all(unchanged for _, _, unchanged in group)
        inside = sum(path in held for path, _, _ in group)
        if whole and inside not in (0, len(group)):
            whole = False  # split between two trees: no longer one file if linked
        for path, size, _ in group:
            if whole and plan.layer and not inside:
                continue
            if whole and earlier is not None:
                plan.reused.append((path, earlier.file(path)))
                plan.reused_bytes += size
            else:
                plan.linked.append(path)
                plan.linked_bytes += size


LAYER_SHARE = 4
"""A layer is made only while it holds at most 1/LAYER_SHARE of the tree's files and bytes:
past that a full tree (links to the unchanged files) costs little more and lets the full
tree below be freed once nothing else stands on it."""


def plan_layer(found: Scan, earlier: Earlier) -> _Plan | None:
    """The plan of a layer over `earlier`'s full tree (earlier.below, or earlier.root when
    that is full): the files changed since that tree (copied, or linked from the earlier
    layer that already holds them) and the directories they lie in or whose own attributes
    changed. None when the tree cannot be a layer: an entry of the earlier record is gone
    or changed type (a layer only adds and replaces: deleting would need whiteouts), an
    entry is neither a file, a link nor a directory (a character device 0/0 is what overlay
    reads as a deletion), or the layer would pass 1/LAYER_SHARE of the tree."""
    if earlier.record is None or found.deep:
        return None
    now = {e[0]: e for e in found.record}
    ifmt, stamp = _IFMT, earlier.stamp
    held = earlier.held if earlier.below is not None else frozenset()
    wanted: set[str] = set()
    links: dict[str, Entry] = {}
    before: set[str] = set()
    """The directories recorded: one now that was not is new, and in the layer."""
    for old in earlier.record:
        path: str = old[0]  # type: ignore[assignment]
        new = now.get(path)
        if new is None or (new[_MODE] ^ old[_MODE]) & ifmt:  # type: ignore[operator]
            return None
        kind = old[_MODE] & ifmt  # type: ignore[operator]
        if kind == _IFDIR:
            # a directory the layer leaves out shows the full tree's attributes: it must be
            # unchanged since the record (and not racily so), and not held by the last layer
            before.add(path)
            if path and (old != new or path in held or new[3] >= stamp  # type: ignore[operator]
                         or new[4] >= stamp):  # type: ignore[operator]
                wanted.add(path)
        elif kind == _IFLNK and old[3] < stamp and old[4] < stamp:  # type: ignore[operator]
            # a symbolic link the record vouches for is left to the tree below too: one is
            # never changed in place, only replaced (a new inode and ctime)
            links[path] = old
    for entry in found.entries:
        if entry[_MODE] & ifmt not in (_IFREG, _IFLNK):  # type: ignore[operator]
            return None
    plan = _plan(found, earlier.replace(known={**earlier.known, **links})
                 if links else earlier, layer=True)
    files = sum(len(b) for b in plan.batches) + len(plan.linked) + len(plan.reused)
    size = sum(plan.batch_bytes) + plan.linked_bytes + plan.reused_bytes
    if files * LAYER_SHARE > max(found.files, 1) or size * LAYER_SHARE > max(found.size, 1):
        return None
    wanted.update(rel for rel, _ in found.dirs if rel not in before)
    held_files = [p for b in plan.batches for p in b] + plan.linked + [
        r for r, _ in plan.reused]
    wanted.update(path.rpartition("/")[0] for path in held_files)
    closed: set[str] = set()
    for directory in wanted:  # and every directory above one the layer holds
        while directory and directory not in closed:
            closed.add(directory)
            directory = directory.rpartition("/")[0]
    wanted = closed
    plan.dirs = [rel for rel, _ in found.dirs if rel in wanted]
    plan.held = plan.dirs + held_files
    return plan


def measure(root: Path) -> TreeStats:
    """Count the non-directory entries under `root` and sum the sizes of its regular files."""
    found = scan(root)
    return TreeStats(found.files, found.size)


def _cp(argv: list[str], cwd: Path) -> None:
    from devcell.backends.host import children  # a copy by `cp` only: subprocess with it

    done = children.run(argv, cwd=cwd)
    if done.returncode != 0:
        raise BackendError(f"copying from {cwd} failed: {done.stderr.strip()[:500]}")


def _copy_dir_attributes(src: Path, dst: Path, st: os.stat_result) -> None:
    for name in os.listxattr(src, follow_symlinks=False):
        os.setxattr(dst, name, os.getxattr(src, name, follow_symlinks=False),
                    follow_symlinks=False)
    if os.geteuid() == 0 or st.st_uid == os.geteuid():
        os.chown(dst, st.st_uid, st.st_gid, follow_symlinks=False)
    os.chmod(dst, stat.S_IMODE(st.st_mode))
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def workers() -> int:
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


class Checkpointed(Record):
    """What `checkpoint_tree` made: the tree's totals and what it shared with an earlier one."""

    stats: TreeStats
    reused_files: int
    reused_bytes: int
    held: list[str] | None = None
    """A layer (checkpoint_layer): the paths it holds; None for a full tree."""


def copy_tree(src: Path, dst: Path, *, description: str = "copying") -> TreeStats:
    """Copy directory `src` to `dst` (which must not exist) as `cp -a` would; what was copied.

    Progress (bytes) is reported through devcell.progress as each batch finishes.
    """
    return checkpoint_tree(src, dst, description=description).stats


def checkpoint_tree(src: Path, dst: Path, *, description: str = "copying",
                  reuse: Reuse | None = None, scanned: Scan | None = None) -> Checkpointed:
    """`copy_tree`, except that each regular file `reuse` vouches for is a hard link to the
    identical file it names (in an earlier, immutable checkpoint) instead of a copy.
    `scanned` is the caller's walk of `src` (taken while its writers are frozen), if any.

    Links are only ever made from that earlier file, never from `src`: a file of a live
    workspace linked into a checkpoint would change with the next write in the workspace.
    """
    if dst.exists() or dst.is_symlink():
        raise BackendError(f"refusing to copy over existing {dst}")
    src, dst = src.absolute(), dst.absolute()  # cp runs inside src
    try:
        found = scanned if scanned is not None else scan(src)
        room = PATH_MAX - len(os.fsencode(str(dst))) - 1
        if found.longest > room:
            raise BackendError(
                f"{src} holds a path of {found.longest} bytes, longer than the {room} a copy "
                f"to {dst} can name (PATH_MAX); nothing was copied. Shorten or remove it "
                "from inside the cell (devcell exec), then try again")
        plan = _plan(found, reuse)
        with progress.track(description, found.size) as advance:
            _copy(src, dst, found, plan, advance)
    except OSError as exc:
        raise BackendError(f"copying {src} to {dst} failed: {exc}") from None
    return Checkpointed(TreeStats(found.files, found.size), len(plan.reused), plan.reused_bytes)


def checkpoint_layer(src: Path, dst: Path, earlier: Earlier, scanned: Scan, *,
                   description: str = "copying") -> Checkpointed | None:
    """`checkpoint_tree` as a layer over `earlier`'s full tree: only what changed since that
    tree (see plan_layer), so a checkpoint after a small change costs that change, not a
    link per file. None, having written nothing, when the tree cannot be a layer."""
    if dst.exists() or dst.is_symlink():
        raise BackendError(f"refusing to copy over existing {dst}")
    src, dst = src.absolute(), dst.absolute()
    if scanned.longest > PATH_MAX - len(os.fsencode(str(dst))) - 1:
        return None  # checkpoint_tree says why
    try:
        plan = plan_layer(scanned, earlier)
        if plan is None:
            return None
        with progress.track(description, scanned.size) as advance:
            advance(scanned.size - sum(plan.batch_bytes) - plan.linked_bytes
                    - plan.reused_bytes)  # the full tree below holds the rest
            _copy(src, dst, scanned, plan, advance)
    except OSError as exc:
        raise BackendError(f"copying {src} to {dst} failed: {exc}") from None
    shared = scanned.size - sum(plan.batch_bytes) - plan.linked_bytes
    return Checkpointed(TreeStats(scanned.files, scanned.size),
                    scanned.files - sum(len(b) for b in plan.batches) - len(plan.linked),
                    shared, plan.held)


WATCH_ABOVE = 16 * 2**20
"""A few big files are copied by one `cp`: above this size, progress comes from watching the
destination grow (cheap with few files) instead of arriving all at the end."""


def _bytes_under(root: Path) -> int:
    try:
        return sum(st.st_size for directory in treewalk.walk(root)
                   for _, st in directory.entries if stat.S_ISREG(st.st_mode))
    except OSError:  # the copy is still making it; the next tick counts again
        return 0


def _serial_copy(src: Path, dst: Path, found: Scan, advance: progress.Advance) -> None:
    if not (progress.active() and found.size >= WATCH_ABOVE):
        _cp([*CP, "--", str(src), str(dst)], src)
        advance(found.size)
        return
    done = threading.Event()
    reported = 0

    def watch() -> None:
        nonlocal reported
        while not done.wait(0.2):
            now = min(_bytes_under(dst), found.size)
            if now > reported:
                advance(now - reported)
                reported = now

    watcher = threading.Thread(target=watch, name="treecopy-progress", daemon=True)
    watcher.start()
    try:
        _cp([*CP, "--", str(src), str(dst)], src)
    finally:
        done.set()
        watcher.join()
    advance(found.size - reported)


def _link_batch(pairs: list[tuple[str, str]], dst: Path, src: Path) -> None:
    """Hard-link each earlier file in place of its copy; one that vanished (an earlier
    checkpoint deleted meanwhile) is copied after all. link(2) never follows a link: the
    earlier file is whatever entry that checkpoint holds, and DevCell wrote that tree."""
    into = str(dst)
    link = os.link
    for rel, same in pairs:
        try:
            link(same, f"{into}/{rel}", follow_symlinks=False)
        except FileNotFoundError:
            _cp([*CP[:-1], "--parents", "-t", str(dst), "--", rel], src)


IN_PROCESS_BYTES = 32 * 2**20
IN_PROCESS_FILES = 2048
"""A copy this small (after a small change) copies its plain files in process (host/filecopy.py):
starting `cp` processes costs more there than the copying."""


def _copy_here(batch: list[str], src: Path, dst: Path, into: list[str]) -> None:
    """One batch in process: each plain file with one name by filecopy, the rest (links,
    special files) by one `cp`, which copies them as what they are."""
    rest = [rel for rel in batch if not filecopy.copy_regular(f"{src}/{rel}", f"{dst}/{rel}")]
    if rest:
        _cp([*into, *rest], src)


def _copy(src: Path, dst: Path, found: Scan, plan: _Plan, advance: progress.Advance) -> None:
    if not plan.layer and ((found.files < SERIAL_BELOW and not plan.reused) or found.deep):
        _serial_copy(src, dst, found, advance)
        return
    dst.mkdir(mode=0o700)
    made = found.dirs
    if plan.layer:  # only the directories the layer holds
        wanted = set(plan.dirs)
        made = [(rel, st) for rel, st in found.dirs if rel in wanted]
    for rel, _ in made:
        os.mkdir(f"{dst}/{rel}", 0o700)
    into = [*CP[:-1], "--parents", "-t", str(dst), "--"]
    here = (sum(plan.batch_bytes) <= IN_PROCESS_BYTES
            and sum(len(batch) for batch in plan.batches) <= IN_PROCESS_FILES)
    copies: list[Job] = [
        (functools.partial(_copy_here, batch, src, dst, into) if here
         else functools.partial(_cp, [*into, *batch], src), size)
        for batch, size in zip(plan.batches, plan.batch_bytes, strict=True)]
    if plan.linked:
        copies.append((functools.partial(_cp, [*into, *plan.linked], src), plan.linked_bytes))
    links: list[Job] = [(functools.partial(_link_batch, pairs, dst, src), 0)
                        for pairs in _link_chunks(plan.reused)]
    if plan.reused_bytes:
        advance(plan.reused_bytes)
    # interleaved: a `cp` job's thread only waits for its process, so links made meanwhile
    # use the time; links first would leave the copies (the long pole after a small
    # change) for last, copies first would keep every thread waiting on processes
    _run_jobs(_interleave(copies, links), workers(), advance)
    for rel, st in reversed(made):
        _copy_dir_attributes(src / rel, dst / rel, st)
    _copy_dir_attributes(src, dst, src.stat())


Job = tuple[Callable[[], None], int]
"""One unit of a parallel copy: what to run, and the bytes it reports as done."""


def _link_chunks(reused: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The files to link in chunks of about LINK_BATCH, cut where a directory ends when one
    ends near there: link(2) locks the directory it adds a name to, so two threads linking
    into one directory wait for each other, while different directories do not."""
    chunks: list[list[tuple[str, str]]] = []
    start = 0
    while start < len(reused):
        end = min(start + LINK_BATCH, len(reused))
        if end < len(reused):
            here = reused[end][0].rpartition("/")[0]
            cut = end
            while cut > start + LINK_BATCH // 2 and reused[cut - 1][0].rpartition("/")[0] == here:
                cut -= 1
            end = cut if reused[cut - 1][0].rpartition("/")[0] != here else end
        chunks.append(reused[start:end])
        start = end
    return chunks


def _interleave(first: list[Job], second: list[Job]) -> list[Job]:
    merged: list[Job] = []
    for i in range(max(len(first), len(second))):
        merged += first[i:i + 1] + second[i:i + 1]
    return merged


def _run_jobs(jobs: list[Job], threads: int, advance: progress.Advance) -> None:
    """Run `jobs` on up to `threads` threads, in order as threads come free; the first
    failure is raised once every started job has ended, and no job starts after it.
    Plain threads rather than concurrent.futures, which brings the logging package along
    (~20 ms of a snapshot process's CPU)."""
    pending = iter(jobs)
    lock = threading.Lock()
    failures: list[BaseException] = []

    def work() -> None:
        while True:
            with lock:
                if failures:
                    return
                job = next(pending, None)
            if job is None:
                return
            run, size = job
            try:
                run()
            except BaseException as exc:  # raised on the caller's thread below
                with lock:
                    failures.append(exc)
                return
            with lock:
                advance(size)

    if len(jobs) <= 1 or threads <= 1:
        for run, size in jobs:
            run()
            advance(size)
        return
    started = [threading.Thread(target=work, name="treecopy", daemon=True)
               for _ in range(min(threads, len(jobs)))]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    if failures:
        raise failures[0]


def signature(root: Path) -> bytes:
    """A digest of (path, type, size, mtime_ns, mode) of every entry: a cheap change detector.

    The tree is a cell's to shape: it is walked by treewalk (no recursion, no link followed,
    one descriptor at a time), so a tree deeper than PATH_MAX or Python's recursion limit is
    no error. Each path is folded into a digest chained from its parent's, and the entries'
    digests are summed (the order of a listing does not matter), so memory stays in
    proportion to the depth, not to the number of files or the length of the paths.
    """
    total = 0
    for directory in treewalk.walk(root):
        parent = directory.parent.key if directory.parent is not None else b""
        directory.key = hashlib.sha256(parent + b"/" + os.fsencode(directory.name)).digest()
        for name, st in directory.entries:
            kind = "d" if stat.S_ISDIR(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else "o"
            size, mtime = (0, 0) if kind == "d" else (st.st_size, st.st_mtime_ns)
            item = hashlib.sha256(b"%s/%s\0%s %d %d %d" % (
                directory.key, os.fsencode(name), kind.encode(), size, mtime, st.st_mode))
            total = (total + int.from_bytes(item.digest(), "big")) % (1 << 256)
    return total.to_bytes(32, "big")


def is_empty(root: Path) -> bool:
    with os.scandir(root) as entries:
        return next(entries, None) is None


def remove_tree(path: Path, trash: Path) -> None:
    """Remove `path`: first renamed to `trash` (atomic: never seen half-removed), then deleted.

    Deleted by `rm -rf --one-file-system`, which walks by descriptors: a tree a cell made
    deeper than PATH_MAX or Python's recursion limit goes too, and no link is followed.
    What could not be removed is logged: for clean-up beside another error. A deletion the
    user asked for (a volume, a checkpoint) uses remove_tree_fully, which says so.
    """
    left = _remove_renamed(path, trash)
    if left:
        logger.warning("could not remove all of {}: {}", trash, left)


def remove_tree_fully(path: Path, trash: Path) -> None:
    """`remove_tree`, raising BackendError when something stayed (files the user running
    DevCell may not remove, such as root's in a workspace), naming what and why: a delete
    or a collection then never reports as removed, nor counts as freed, what is still there."""
    left = _remove_renamed(path, trash)
    if left:
        raise BackendError(f"could not remove all of {path}: {left} (what is left is in "
                           f"{trash}: remove it as the files' owner)")


def _remove_renamed(path: Path, trash: Path) -> str:
    """What `rm` said of what it could not remove (empty when all went)."""
    if not path.exists() and not path.is_symlink():
        return ""
    os.rename(path, trash)
    if os.path.islink(trash):
        os.unlink(trash)  # the link itself; what it names is not this tree
        return ""
    detach_mounts_under(trash)
    from devcell.backends.host import children

    done = children.run(["rm", "-rf", "--one-file-system", "--", str(trash)])
    if done.returncode == 0 and not os.path.lexists(trash):
        return ""
    lines = done.stderr.strip().splitlines()
    shown = "; ".join(lines[:3]) + (f"; and {len(lines) - 3} more" if len(lines) > 3 else "")
    return shown[:600] or "rm failed"


def _mountinfo_path(field: str) -> str:
    """A mount point as /proc/self/mountinfo writes it (octal escapes for space, tab, ...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def detach_mounts_under(root: Path) -> None:
    """Detach whatever is mounted below `root` (a fork's overlay left by a crash between
    mounting and recording it), deepest first, so removing `root` leaves no mount behind.
    A `root` that is a link is nobody's tree to detach: it is never resolved."""
    if os.path.islink(root):
        return
    prefix = os.path.realpath(root) + "/"  # mountinfo names the real path
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
            points = [_mountinfo_path(line.split(" ")[4]) for line in info]
    except OSError:
        return
    below = sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)
    if not below:
        return
    import ctypes  # libffi: only when there is something to detach or flush

    libc = ctypes.CDLL(None, use_errno=True)
    for point in below:
        if libc.umount2(os.fsencode(point), 2) != 0:  # MNT_DETACH
            logger.warning("could not detach the mount at {}", point)


def sync_filesystem(path: Path) -> None:
    """Flush the filesystem holding `path` to disk (syncfs(2); sync(2) where unavailable)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syncfs(fd) != 0:
            os.sync()
    except (OSError, AttributeError):
        os.sync()
    finally:
        os.close(fd)
