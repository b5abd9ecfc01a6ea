"""The build context that installs a cell's features on its base image.

One folder per content under `<state>/features/contexts/<cell>/<hash>`: a Dockerfile and,
for each feature in installation order, `fN/feature/` (the feature's files) and
`fN/options.env` (its options and the user variables, shell-quoted). Each feature is one
COPY and one RUN, its containerEnv ENV lines after it, so changing the options of the last
feature reruns only its step and the engine's cache keeps the ones before; the features'
entrypoints, if any, become the image's ENTRYPOINT (run in order before the container's
command, as the devcontainer CLI runs them). A folder is named by a hash of everything in
it and never changed once written: an unchanged cell finds its folder as it was (the build
digest cache answers from a walk, with no hash and no build), and a build reading one while
someone else (`diff`, the daemon) prepares the next manifest's sees it whole. Older ones go
after an hour.

Files copied from a local feature folder must be regular files or directories (a link in
it is refused naming it, never followed), bounded in number and size.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import stat
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from devcell.backends.features import fetch
from devcell.errors import ImageBuildFailed

MAX_FILES = 10_000
MAX_BYTES = 64 * 1024 * 1024
TARGET = "/tmp/devcell-features"
STALE_SECONDS = 3600.0


@dataclass(frozen=True)
class Step:
    """One feature to install: resolved, with the environment its install.sh gets."""

    resolved: fetch.Resolved
    env: dict[str, str]


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _tree(folder: str, shown: str) -> dict[str, tuple[bytes, int] | None]:
    """The files of `folder` (relative path -> (content, mode); a directory -> None),
    links and special files refused. Walked by directory descriptors, each entry opened
    relative to its directory without following links: a local feature folder may lie in a
    folder a cell writes (a live workspace), and a directory swapped for a link while it is
    read must not lead the copy (and so the image) to a host file."""
    found: dict[str, tuple[bytes, int] | None] = {}
    total = 0
    try:
        top = os.open(folder, _DIR)
    except OSError as exc:
        raise ImageBuildFailed(f"feature {shown}: {folder} cannot be read as a directory "
                               f"({exc.strerror}; a link is not followed)") from None
    stack = [("", top)]
    try:
        while stack:
            rel, dir_fd = stack.pop()
            try:
                for name in sorted(os.listdir(dir_fd)):
                    path = f"{rel}/{name}" if rel else name
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        found[path] = None
                        try:
                            stack.append((path, os.open(name, _DIR, dir_fd=dir_fd)))
                        except OSError:
                            raise ImageBuildFailed(f"feature {shown}: {path} changed while "
                                                   "read") from None
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        raise ImageBuildFailed(f"feature {shown}: {path} is not a regular "
                                               "file or directory (a link or special file); "
                                               "a feature's files are copied as they are, "
                                               "never followed")
                    total += st.st_size
                    if len(found) >= MAX_FILES or total > MAX_BYTES:
                        raise ImageBuildFailed(f"feature {shown}: more than {MAX_FILES} files "
                                               f"or {MAX_BYTES >> 20} MiB")
                    try:
                        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                                     | os.O_NONBLOCK, dir_fd=dir_fd)
                    except OSError:
                        raise ImageBuildFailed(f"feature {shown}: {path} changed while "
                                               "read") from None
                    with os.fdopen(fd, "rb") as f:
                        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                            raise ImageBuildFailed(f"feature {shown}: {path} changed while "
                                                   "read")
                        data = f.read(MAX_BYTES + 1)
                    found[path] = (data, 0o755 if st.st_mode & 0o111 else 0o644)
            finally:
                os.close(dir_fd)
    finally:
        for _, left in stack:
            os.close(left)
    return found


USER_ARG = "DEVCELL_IMAGE_USER"
"""The base image's own user, given by the build-image step as a build argument (read from
the engine then, as the image may only be pulled or built by that step): install.sh runs as
root, and the image is handed back to that user afterwards, as the devcontainer CLI does."""
_USERS = f"""\
_REMOTE_USER="${{_REMOTE_USER:-${{{USER_ARG}:-root}}}}"
_CONTAINER_USER="${{_CONTAINER_USER:-$_REMOTE_USER}}"
_REMOTE_USER_HOME="$(awk -F: -v u="$_REMOTE_USER" '$1 == u || $3 == u {{print $6; exit}}' \
/etc/passwd 2>/dev/null)"
if [ -z "$_REMOTE_USER_HOME" ]; then
  if [ "$_REMOTE_USER" = root ]; then _REMOTE_USER_HOME=/root
  else _REMOTE_USER_HOME="/home/$_REMOTE_USER"; fi
fi
_CONTAINER_USER_HOME="$_REMOTE_USER_HOME"
"""
"""The specification's user variables, for install.sh: spec.user when the manifest says
(written above these lines), else the base image's user; each home from the image's
/etc/passwd."""


def dockerfile(base: str, steps: Sequence[Step]) -> str:
    lines = [f"FROM {base}", f"ARG {USER_ARG}=root", "USER root"]
    for n, step in enumerate(steps):
        where = f"{TARGET}/f{n}"
        lines.append(f"# {n + 1}: {step.resolved.feature.id} ({_comment(step.resolved.ref.text)})")
        lines.append(f"COPY f{n}/ {where}/")
        lines.append(f"RUN cd {where}/feature && chmod +x install.sh && set -a && "
                     f". {where}/options.env && set +a && ./install.sh && rm -rf {where}")
        for name, value in sorted(step.resolved.feature.container_env.items()):
            lines.append(f"ENV {name}={json.dumps(value, ensure_ascii=False)}")
    entrypoints = [s.resolved.feature.entrypoint for s in steps if s.resolved.feature.entrypoint]
    if entrypoints:
        # As the devcontainer CLI starts a container: each feature's entrypoint in turn (one
        # that starts a daemon returns once it runs), then the container's own command.
        script = "\n".join([*entrypoints, 'exec "$@"'])
        lines.append("ENTRYPOINT " + json.dumps(["/bin/sh", "-c", script, "-"]))
    lines.append(f"USER ${{{USER_ARG}}}")
    return "\n".join(lines) + "\n"


def _comment(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)


def options_env(env: dict[str, str]) -> str:
    """install.sh's environment: its options (shell-quoted), then the user variables."""
    return ("".join(f"{name}={shlex.quote(value)}\n" for name, value in sorted(env.items()))
            + _USERS)


def write(state_dir: Path, cell_name: str, base: str, steps: Sequence[Step]) -> str:
    """The cell's context folder for these steps, written once; its path."""
    wanted: dict[str, tuple[bytes, int] | None] = {
        "Dockerfile": (dockerfile(base, steps).encode(), 0o644)}
    for n, step in enumerate(steps):
        wanted[f"f{n}"] = None
        wanted[f"f{n}/options.env"] = (options_env(step.env).encode(), 0o644)
        wanted[f"f{n}/feature"] = None
        for rel, entry in _tree(step.resolved.folder, step.resolved.shown).items():
            wanted[f"f{n}/feature/{rel}"] = entry
    h = hashlib.sha256()
    for rel in sorted(wanted):
        entry = wanted[rel]
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        if entry is not None:
            h.update(f"{entry[1]:o}\0{len(entry[0])}\0".encode() + entry[0])
    root = Path(state_dir) / fetch.DIRECTORY / "contexts"
    cell_dir = root / cell_name
    for step_dir in (root.parent, root, cell_dir):
        step_dir.mkdir(mode=0o700, exist_ok=True)
        if step_dir.is_symlink():
            raise ImageBuildFailed(f"{step_dir} is a link; DevCell made it a directory")
    folder = cell_dir / h.hexdigest()[:24]
    if not folder.is_dir() or folder.is_symlink():
        tmp = Path(tempfile.mkdtemp(dir=cell_dir, prefix=".new-"))
        try:
            _fill(tmp, wanted)
            os.rename(tmp, folder)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not folder.is_dir():
                raise
    else:
        _mend_directories(folder)
    _drop_old(cell_dir, keep=folder)
    return str(folder)


def _mend_directories(folder: Path) -> None:
    """A context written before its directories were made 0755 whatever the umask (0700
    under a umask of 077) made so: its build digest changes, so the image is built again with
    directories the image's users can read. Nothing is changed in one that is right."""
    for top, dirs, _files in os.walk(folder):
        for name in dirs:
            path = os.path.join(top, name)
            found = os.lstat(path)  # (a context holds no links: _tree refuses them)
            if stat.S_ISDIR(found.st_mode) and stat.S_IMODE(found.st_mode) != 0o755:
                os.chmod(path, 0o755)


def _fill(folder: Path, wanted: dict[str, tuple[bytes, int] | None]) -> None:
    os.chmod(folder, 0o755)
    for rel in sorted(wanted):
        entry = wanted[rel]
        path = folder / rel
        if entry is None:
            path.mkdir(0o700)
            os.chmod(path, 0o755)  # whatever our umask: COPY keeps it, and install.sh's cp -r
            continue
        data, mode = entry
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(path, mode)


def _drop_old(cell_dir: Path, keep: Path) -> None:
    """The cell's other contexts, once nothing can still be building from them (an hour
    old): a context is never changed once written, so a build reading one (another
    process's, for the manifest before an edit) sees it whole."""
    stale = time.time() - STALE_SECONDS
    for other in cell_dir.iterdir():
        if other == keep:
            continue
        try:
            if other.lstat().st_mtime < stale:
                if other.is_dir() and not other.is_symlink():
                    shutil.rmtree(other, ignore_errors=True)
                else:
                    other.unlink()
        except FileNotFoundError:
            continue


def forget(state_dir: Path, cell_name: str) -> None:
    """Remove the cell's context folder (the cell is deleted); never through a link."""
    folder = Path(state_dir) / fetch.DIRECTORY / "contexts" / cell_name
    if folder.is_symlink():
        folder.unlink()
    elif folder.is_dir():
        shutil.rmtree(folder, ignore_errors=True)
