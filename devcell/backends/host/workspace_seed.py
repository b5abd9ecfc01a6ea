"""What a new workspace starts with (`spec.workspace.source`): a git repository cloned
(git_source.py), a directory of this host copied in once, or the files of a snapshot archive
(`devcell snapshot export`) read as an import reads them. (A host folder bound live is no
seed: host/live_folder.py.)

A directory is the developer's, under the host-path rules of DevCell's configuration (the
same `security.allowedHostPaths` a host mount needs): judged at admission and again here,
when the workspace is made, and copied from the path it resolves to then, so a link swapped
in since admission is refused rather than followed. A running cell may be writing it (its
live folder, a writable mount), so it is copied through descriptors (`copy_directory`), never
by `cp`, which names each file by a path: a directory swapped for a link to /etc while `cp`
copied put host files in the new workspace. Links stay links, never followed; the source is
only read, never changed or removed.

An archive is the same file `snapshot import` takes; it is judged here like a directory and
unpacked by archives/unpack.py (the archives package lies above these host tools).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcell import names
from devcell.backends.host import filecopy, git_source, treecopy, treewalk
from devcell.errors import BackendError, BackendRefused


@dataclass(frozen=True)
class DirectorySource:
    path: str

    @property
    def shown(self) -> str:
        return names.printable(self.path)


@dataclass(frozen=True)
class ArchiveSource:
    path: str

    @property
    def shown(self) -> str:
        return names.printable(self.path)


Seed = git_source.GitSource | DirectorySource | ArchiveSource


def of_spec(spec: dict[str, Any], *, host_credentials: bool = True) -> Seed | None:
    """The source a cell's spec gives its new workspace (None: none, or a fork's);
    `host_credentials`: whether a git source may use the host's (git_source)."""
    workspace = spec.get("workspace") or {}
    if workspace.get("from") is not None:
        return None
    source = workspace.get("source") or {}
    if source.get("directory") is not None:
        return DirectorySource(str(source["directory"]["path"]))
    if source.get("archive") is not None:
        return ArchiveSource(str(source["archive"]["path"]))
    return git_source.of_spec(spec, host_credentials=host_credentials)


def checked(seed: Seed, state_dir: Path) -> Seed:
    """`seed` as it may be used now (a local path judged again, and resolved)."""
    if isinstance(seed, git_source.GitSource):
        return git_source.checked(seed, state_dir)
    from devcell import config, security

    doing = "copying" if isinstance(seed, DirectorySource) else "reading archive"
    problem = security.host_path_problem(seed.path.rstrip("/") or "/",
                                         config.load(state_dir).security, state_dir)
    if problem:
        raise BackendRefused(f"{doing} {seed.shown}: {problem}")
    resolved = os.path.realpath(seed.path)
    if isinstance(seed, ArchiveSource):
        if not os.path.isfile(resolved):
            raise BackendRefused(f"{doing} {seed.shown}: it is not a file (any more)")
        return ArchiveSource(resolved)
    if not os.path.isdir(resolved):
        raise BackendRefused(f"{doing} {seed.shown}: it is not a directory (any more)")
    return DirectorySource(resolved)


def fill(seed: git_source.GitSource | DirectorySource, into: Path, *, cell_name: str) -> None:
    """Make `into` (which must not exist) hold what `seed` gives (an ArchiveSource is
    unpacked by archives/unpack.py, which reads it as an import does)."""
    if isinstance(seed, git_source.GitSource):
        git_source.clone(seed, into)
        return
    copy_directory(Path(seed.path), into, shown=seed.shown)


_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def copy_directory(src: Path, dst: Path, *, shown: str) -> treecopy.TreeStats:
    """`src` copied into the new directory `dst` as `cp -a` would (modes, owners, times of
    files and links, extended attributes of files; FIFOs made again; sockets and devices
    left out; a file of several names copied once per name), every entry opened relative to
    its directory's descriptor without following a link (treewalk), so whatever a cell
    swaps in while it is copied is copied as what it is or refused, never followed. `src`
    is the path judged against the host-path rules: the directory opened must be the one
    found there (a component swapped for a link since is refused)."""
    files = size = 0
    for directory in treewalk.walk(src):
        if directory.parent is None and os.readlink(
                f"/proc/self/fd/{directory.fd}") != os.path.normpath(os.path.abspath(src)):
            raise BackendRefused(f"copying {shown}: it changed since it was checked (a part "
                                 "of its path is now a link); nothing copied")
        here = dst / directory.path() if directory.parent is not None else dst
        _make_dir(here, directory.st)
        for name, seen in directory.entries:
            target = os.fspath(here / name)
            kind = stat.S_IFMT(seen.st_mode)
            if kind == stat.S_IFDIR:
                continue  # made when the walk enters it
            if kind == stat.S_IFREG:
                size += _copy_file(directory.fd, name, seen, target, shown)
            elif kind == stat.S_IFLNK:
                try:
                    os.symlink(os.readlink(name, dir_fd=directory.fd), target)
                except FileNotFoundError:
                    continue  # removed meanwhile
                except OSError as exc:
                    if exc.errno != errno.EINVAL:  # replaced by something else meanwhile
                        raise
                    continue
                _own(target, seen)
            elif kind == stat.S_IFIFO:
                os.mkfifo(target, stat.S_IMODE(seen.st_mode))
                _own(target, seen)
            else:
                continue  # a socket or a device: never opened, not copied
            files += 1
    return treecopy.TreeStats(files, size)


def _make_dir(path: Path, st: os.stat_result) -> None:
    os.mkdir(path, 0o700)
    _own(os.fspath(path), st)
    os.chmod(path, stat.S_IMODE(st.st_mode), follow_symlinks=False)


def _own(path: str, st: os.stat_result) -> None:
    if os.geteuid() == 0:
        os.chown(path, st.st_uid, st.st_gid, follow_symlinks=False)
    if not os.path.isdir(path) or os.path.islink(path):
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _copy_file(directory: int, name: str, seen: os.stat_result, target: str,
               shown: str) -> int:
    """The regular file `name` of `directory` copied to `target`; its size (0 when it went
    away meanwhile)."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=directory)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # replaced by a link or a socket
            return 0
        raise BackendError(f"copying {shown}: {names.printable(name)}: "
                           f"{exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            return 0  # replaced meanwhile (a FIFO, a device): never read
        filecopy.copy_opened(fd, st, target)
        return st.st_size
    finally:
        os.close(fd)

