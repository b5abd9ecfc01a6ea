"""One check of the state directory before any command uses it: a directory of this user's
(or a place where one can be made), on a writable file system.

Each command met a bad state directory its own way: `apply` with a FileExistsError traceback
when it was a regular file or a FIFO, `get cells` with "No resources found." and exit 0, a
permission traceback for another user's directory, and the root of a read-only mount blamed
on its writable parent. Checked once, at the CLI's edge, every command says the same line:
the path, what is wrong with it and the fix. Only stat calls: nothing is made or opened.

Where the state directory is (`resolve`) is decided here too. Both are on the path of `devcell
exec`'s fast path, so this module imports the error classes only when it refuses, and pathlib
(with urllib.parse, ipaddress, fnmatch: ~7 ms) only in `resolve`: the fast path asks `location`
for a string and checks that, as the other commands check resolve()'s Path.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # mypy reads this as True
if TYPE_CHECKING:
    from pathlib import Path

_FIX = "point --state-dir (or $DEVCELL_HOME) at"

_TYPES = {stat.S_IFREG: "a regular file", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


def resolve(explicit: str | None = None) -> Path:
    """--state-dir, else $DEVCELL_HOME, else $XDG_DATA_HOME/devcell (~/.local/share/devcell)."""
    from pathlib import Path

    if explicit:
        found = Path(explicit).expanduser()
    elif os.environ.get("DEVCELL_HOME"):
        found = Path(os.environ["DEVCELL_HOME"]).expanduser()
    else:
        xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                              "share")
        found = Path(xdg) / "devcell"
    try:
        return found.absolute()
    except FileNotFoundError:  # os.getcwd(): the current directory was removed
        raise _gone(str(found)) from None


def location(explicit: str | None = None) -> str | None:
    """The directory resolve() names, as a string made without pathlib (exec's fast path):
    the same directory, not always spelled alike (a Path drops `.` parts and doubled
    slashes). None where resolve() raises (a `~user` that is no user, a relative path from a
    current directory that was removed): left to it."""
    given = explicit or os.environ.get("DEVCELL_HOME")
    if given:
        found = os.path.expanduser(given)
        if found.startswith("~"):
            return None
    else:
        xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                              "share")
        found = os.path.join(xdg, "devcell")
    if os.path.isabs(found):  # os.getcwd() fails in a removed directory: asked only if needed
        return found
    try:
        return os.path.join(os.getcwd(), found)
    except FileNotFoundError:
        return None


def _gone(state_dir: str) -> Exception:
    from devcell.errors import StateError

    return StateError(f"the state directory {state_dir} is relative to the current directory, "
                      f"which was removed: change to a directory that exists, or {_FIX} an "
                      "absolute path")


def _unusable(message: str, *, cause: str, path: str) -> Exception:
    """StateUnusable, with StorageError's code `cause` (the classes load only to refuse)."""
    from devcell.errors import StateUnusable, StorageError

    return StateUnusable(message, cause=getattr(StorageError, cause), path=path)


def _what(mode: int) -> str:
    return _TYPES.get(stat.S_IFMT(mode), "not a directory")


def _user(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check(state_dir: str | Path) -> None:
    """Refuse (StateUnusable) a state directory no command can use as it is."""
    try:
        found = os.stat(state_dir)  # a link to a directory is that directory
    except (FileNotFoundError, NotADirectoryError):  # not made yet, or a file on the way
        if os.path.islink(state_dir):  # a dangling link: making it would fail (EEXIST)
            raise _unusable(
                f"the state directory {state_dir} is a symbolic link to "
                f"{os.readlink(state_dir)}, which does not exist: make that directory, "
                f"remove the link, or {_FIX} a directory", cause="UNSAFE_PATH",
                path=str(state_dir)) from None
        _check_missing(state_dir)
        return
    except OSError as exc:  # EACCES: a directory above it not searchable
        _refuse_unreachable(state_dir, exc)
        return
    if not stat.S_ISDIR(found.st_mode):
        raise _unusable(
            f"the state directory {state_dir} is {_what(found.st_mode)}, not a directory: move "
            f"it away, or {_FIX} a directory", cause="UNSAFE_PATH",
            path=str(state_dir))
    if found.st_uid != os.geteuid():
        raise _unusable(
            f"the state directory {state_dir} belongs to {_user(found.st_uid)}, not to "
            f"{_user(os.geteuid())} who runs devcell: DevCell keeps a state directory "
            f"owner-only; run devcell as its owner, or {_FIX} a directory of your own",
            cause="PERMISSION_DENIED", path=str(state_dir))
    _refuse_read_only(state_dir, state_dir)  # before access(), which fails on it too
    if not os.access(state_dir, os.R_OK | os.W_OK | os.X_OK):
        raise _unusable(
            f"the state directory {state_dir} is not open to its owner (permission denied): "
            f"`chmod 700 {state_dir}`, or {_FIX} another directory",
            cause="PERMISSION_DENIED", path=str(state_dir))


def _check_missing(state_dir: str | Path) -> None:
    """A state directory not made yet: the nearest thing that exists above it must be a
    directory that one can be made in (a fresh install reads as "nothing recorded")."""
    above = os.path.dirname(state_dir)
    while True:
        try:
            found = os.stat(above)
            break
        except (FileNotFoundError, NotADirectoryError):
            if os.path.dirname(above) == above:
                return
            above = os.path.dirname(above)
        except OSError as exc:
            _refuse_unreachable(state_dir, exc)
            return
    if not stat.S_ISDIR(found.st_mode):
        raise _unusable(
            f"the state directory {state_dir} cannot be made: {above} is {_what(found.st_mode)}, "
            f"not a directory: move it away, or {_FIX} a directory",
            cause="UNSAFE_PATH", path=str(state_dir))
    _refuse_read_only(state_dir, above)


def _refuse_unreachable(state_dir: str | Path, exc: OSError) -> None:
    raise _unusable(
        f"the state directory {state_dir} cannot be reached ({exc.strerror}): give this user "
        f"access to the directories above it, or {_FIX} a directory of your own",
        cause="PERMISSION_DENIED", path=str(state_dir))


def _refuse_read_only(state_dir: str | Path, existing: str | Path) -> None:
    """`existing` (the state directory, or where it would be made) on a read-only mount is
    refused naming that mount: its root is not its parent's fault."""
    if not os.statvfs(existing).f_flag & os.ST_RDONLY:
        return
    mount = _mount_point(existing)
    raise _unusable(
        f"the state directory {state_dir} is on a read-only file system (mounted read-only at "
        f"{mount}): remount it read-write, or {_FIX} a writable directory",
        cause="READ_ONLY", path=str(state_dir))


def _mount_point(path: str | Path) -> str:
    """The mount `path` is on: the highest directory above it on the same device."""
    path = os.path.realpath(path)
    device = os.stat(path).st_dev
    while os.path.dirname(path) != path and os.stat(os.path.dirname(path)).st_dev == device:
        path = os.path.dirname(path)
    return path
