"""Overlay mounts for forks: a checkpoint as the read-only lower layer, the fork's writes above.

A fork made this way costs nothing up front (two empty directories and a mount), whatever the
size of its snapshot; the kernel copies a file up into the fork's upper directory the first
time the fork changes it, so the checkpoint below never changes through the fork, whatever a
process does (write in place, truncate, append, rename over, link, chmod). Options are
spelled out rather than left to the kernel's defaults: with `redirect_dir` and `metacopy` off,
a path the upper directory does not hold is served from the same path below, which is what
`unchanged_below` relies on to let a fork's checkpoint share the unchanged files.

Mounting needs root and the overlay filesystem; where either is missing (or the state
directory's path cannot be written in overlay's option syntax) the caller copies instead.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from devcell.log import logger

if TYPE_CHECKING:
    import ctypes

OPTIONS = "redirect_dir=off,metacopy=off,index=off"
_UNSAFE = set(",:\\\n\t ")
"""Characters overlay's option parser gives a meaning (or that we refuse to escape)."""
_MNT_DETACH = 2
_XATTRS = ("trusted.overlay.opaque", "trusted.overlay.redirect", "trusted.overlay.metacopy")


def supported() -> str | None:
    """None when this process can mount overlays, else why not (shown by describe)."""
    if os.geteuid() != 0:
        return "DevCell does not run as root (overlay mounts need it)"
    try:
        with open("/proc/filesystems") as known:
            if not any(line.split()[-1:] == ["overlay"] for line in known):
                return "the kernel has no overlay filesystem"
    except OSError:
        return "/proc/filesystems is unreadable"
    return None


def nameable(*paths: Path) -> bool:
    return not any(_UNSAFE & set(str(path)) for path in paths)


def _libc() -> ctypes.CDLL:
    import ctypes  # libffi: only to mount or unmount (a snapshot's walk does neither)

    return ctypes.CDLL(None, use_errno=True)


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


Lower = Path | list[Path]
"""One lower directory, or several, uppermost first (a checkpoint layer over its full tree)."""
_MS_RDONLY = 1


def _lowerdir(lower: Lower) -> str:
    return ":".join(str(p) for p in (lower if isinstance(lower, list) else [lower]))


def mount(*, lower: Lower, upper: Path, work: Path, target: Path) -> None:
    """Mount the overlay at `target`; OSError when the kernel refuses."""
    _mount(f"lowerdir={_lowerdir(lower)},upperdir={upper},workdir={work},{OPTIONS}", target, 0)
    logger.bind(target=str(target)).debug("overlay mounted on {}", _lowerdir(lower))


def mount_view(*, lowers: list[Path], target: Path) -> None:
    """Mount the read-only merged view of `lowers` (uppermost first) at `target`: no upper
    directory, so nothing can be written through it."""
    _mount(f"lowerdir={_lowerdir(lowers)},{OPTIONS}", target, _MS_RDONLY)
    logger.bind(target=str(target)).debug("overlay view of {}", _lowerdir(lowers))


def _mount(options: str, target: Path, flags: int) -> None:
    result = _libc().mount(b"overlay", os.fsencode(target), b"overlay", flags,
                           options.encode())
    if result != 0:
        code = _errno()
        raise OSError(code, f"mounting overlay at {target}: {os.strerror(code)}")


def is_mounted(target: Path) -> bool:
    """Whether something is mounted at `target` (its device differs from its parent's)."""
    try:
        return os.lstat(target).st_dev != os.lstat(target.parent).st_dev
    except FileNotFoundError:
        return False


def unmount(target: Path) -> None:
    """Unmount `target` if mounted; a busy mount is detached (gone once its last user is)."""
    if not is_mounted(target):
        return
    libc = _libc()
    if libc.umount2(os.fsencode(target), 0) == 0:
        return
    code = _errno()
    if code == errno.EBUSY and libc.umount2(os.fsencode(target), _MNT_DETACH) == 0:
        return
    if code == errno.EINVAL and not is_mounted(target):
        return
    raise OSError(code, f"unmounting {target}: {os.strerror(code)}")


class UpperIndex:
    """Which paths of a mounted fork are served, unchanged, from its lower layer.

    A regular file is unchanged when neither it nor any directory above it appears in the
    upper directory as anything but a plain directory (not opaque, not redirected): the kernel
    then serves exactly the lower file at the same path. Asked parents-first (as the walk
    goes), it lists each upper directory once.
    """

    def __init__(self, upper: Path) -> None:
        self.upper = upper
        self._dirs: dict[str, frozenset[str] | None] = {}
        """Directory (relative) -> names its upper directory holds; None: all from upper."""

    def _names(self, rel_dir: str) -> frozenset[str] | None:
        if rel_dir in self._dirs:
            return self._dirs[rel_dir]
        parent, _, name = rel_dir.rpartition("/")
        above = self._names(parent) if rel_dir else frozenset()
        if above is None:
            names: frozenset[str] | None = None
        elif rel_dir and name not in above:
            names = frozenset()  # no upper directory: everything below comes from lower
        else:
            names = self._list(self.upper / rel_dir if rel_dir else self.upper)
        self._dirs[rel_dir] = names
        return names

    @staticmethod
    def _list(directory: Path) -> frozenset[str] | None:
        try:
            st = os.lstat(directory)
            if not stat.S_ISDIR(st.st_mode):
                return None
            present = set(os.listxattr(directory, follow_symlinks=False))
            if present & set(_XATTRS):
                return None
            return frozenset(os.listdir(directory))
        except OSError:
            return None  # cannot tell: treat as changed (copied), never as shared

    def unchanged(self, rel: str) -> bool:
        parent, _, name = rel.rpartition("/")
        names = self._names(parent)
        return names is not None and name not in names
