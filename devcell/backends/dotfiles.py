"""A developer's dotfiles (`spec.dotfiles`) put into a running cell, as Codespaces, DevPod and
the devcontainer CLI do with `--dotfiles-repository`.

The repository is cloned on the host by the workspace source's hardened git
(host/git_source.py: no credential in a URL, file/git/ssh/http(s) only, no prompt, no hook,
a deadline), so the cell needs no network and no credential. The clone goes into the cell
through the backend's exec (a tar stream read by the cell's `tar`, as the cell's user) at
`targetPath` (default `~/dotfiles`), then is installed there, as the cell's user: the
`installCommand` file if given, else the first install script of the devcontainer CLI's list
found in the repository, else every top-level dotfile linked into the home (one that is
already there and no link is kept, and said). A target left by an earlier install (marked
inside its .git) is replaced; any other existing target is refused, never removed.

A failing install script is no failure of the operation: the cell stays running and
reachable, and the result (with the script's output: a bounded tail, secrets redacted)
goes into the cell's status, where the controller keeps it not Ready and says why, so the
developer can get in and fix it. The clone on the host is read only by git and tar's writer,
which stores links as links; the cell's answers are read in bounded amounts.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from devcell import names, security
from devcell.backends import interactive, supervisor
from devcell.backends.base import Backend, CellRef, Outputs
from devcell.backends.host import git_source, removal, temporaries
from devcell.errors import BackendError, BackendRefused

if TYPE_CHECKING:
    import tarfile

INSTALL_SECONDS = 600.0
"""How long an install script may run before it is stopped (a failure, said as such)."""
TAIL_BYTES = 4000
"""Bytes of an install's output kept (the last ones): for describe and the event."""
MIN_FRAGMENT = 3
"""Characters of a secret's end at the start of a tail that are redacted as part of it."""
DEFAULT_TARGET = "~/dotfiles"
SCRIPTS = ("install.sh", "install", "bootstrap.sh", "bootstrap", "script/bootstrap",
           "setup.sh", "setup", "script/setup")
"""The install scripts looked for, in order (the devcontainer CLI's list)."""
MARKER = ".git/devcell-dotfiles"
"""Left in a target DevCell filled, so a later install may replace it (and nothing else)."""

_UNPACK = r"""
set -e
case "$1" in
  "~/"*) [ -n "$HOME" ] || { echo "the cell's user has no home (HOME is unset)" >&2; exit 3; }
         t="$HOME/${1#"~/"}" ;;
  *) t="$1" ;;
esac
m="$2"
shift 2
case "$t/" in */../*|*/./*) echo "$t is not a normalised path" >&2; exit 5 ;; esac
r=$(cd -P -- "$(dirname -- "$t")" 2>/dev/null && pwd -P) && r="$r/$(basename -- "$t")" || r="$t"
for p in "$@"; do
  case "$t/ $r/" in "$p/"*|*" $p/"*)
    echo "$t lies in $p, a host folder the cell writes (the developer's files):" \
         "give spec.dotfiles.targetPath outside it" >&2; exit 5 ;;
  esac
done
if [ -e "$t" ] || [ -L "$t" ]; then
  if [ -d "$t" ] && [ ! -L "$t" ] && [ -f "$t/$m" ]; then rm -rf -- "$t"
  else echo "$t exists and was not made by DevCell's dotfiles; move it away" >&2; exit 4; fi
fi
mkdir -p -- "$t"
tar -x -o -f - -C "$t"
: > "$t/$m"
printf '%s\n' "$t"
"""
"""Run in the cell: resolve the target ($1) against the user's home, refuse one in a host
folder the cell writes (the rest of the arguments), replace an earlier install's (marked by
$2), unpack the tar on standard input there; print where it went."""

_INSTALL = r"""
cd -- "$1" || exit 3
if [ -n "$2" ]; then
  echo "devcell: running $2 in $1"
  chmod u+x -- "./$2" 2>/dev/null || true
  exec "./$2"
fi
linked=0
for f in .[!.]* ..?*; do
  if [ ! -e "$f" ] && [ ! -L "$f" ]; then continue; fi
  if [ "$f" = .git ]; then continue; fi
  if [ -e "$HOME/$f" ] && [ ! -L "$HOME/$f" ]; then echo "kept $HOME/$f (it exists)"; continue; fi
  ln -sfn -- "$1/$f" "$HOME/$f"
  linked=$((linked + 1))
done
echo "devcell: linked $linked dotfiles from $1 into $HOME"
"""
"""Run in the cell, in the target ($1): the install script $2, or, when none, every
top-level dotfile linked into the home."""


@dataclass(frozen=True)
class Dotfiles:
    source: git_source.GitSource
    install_command: str | None
    target: str


def of_spec(spec: dict[str, Any]) -> Dotfiles | None:
    """The dotfiles a cell's spec asks for (None: none)."""
    dotfiles = spec.get("dotfiles")
    if not dotfiles:
        return None
    git = dotfiles["git"]
    depth = git.get("depth")
    return Dotfiles(git_source.GitSource(str(git["url"]), git.get("ref"),
                                         int(depth) if depth else None),
                    dotfiles.get("installCommand"), str(dotfiles.get("targetPath")
                                                        or DEFAULT_TARGET))


def install(backend: Backend, cell: CellRef, *, state_dir: Path) -> Outputs:
    """Clone the cell's dotfiles on the host and install them in the running cell. Outputs:
    `state` (Installed or Failed), `commit`, `target`, `how`, `exitCode` and, when failed,
    `output` (the bounded, redacted tail). A clone that fails raises, as a workspace's does."""
    wanted = of_spec(cell.spec)
    if wanted is None:
        raise BackendError(f"cell {cell.name} has no spec.dotfiles to install")
    if not backend.capabilities.exec or not isinstance(backend, interactive.Interactive):
        from devcell.errors import CapabilityMissing

        raise CapabilityMissing(f"the {backend.name} backend cannot run commands in a cell, "
                                "so it cannot install spec.dotfiles")
    source = git_source.checked(dataclasses.replace(
        wanted.source, host_credentials=git_source.host_credentials(
            cell.owner, state_dir, cell.spec.get("sharedWith"))),
        state_dir)
    parent = state_dir / "dotfiles"
    parent.mkdir(mode=0o700, exist_ok=True)
    temporaries.remove_dead(parent)
    clone = parent / temporaries.temp_name(cell.id)
    try:
        git_source.clone(source, clone)
        commit = git_source.head(clone, source)
        command = _install_command(clone, wanted)
        target = _unpack(backend, cell, clone)
        code, output = _run(backend, cell, [target, command or ""])
    finally:
        removal.remove_quietly(clone)
    how = f"ran {command}" if command else "linked its dotfiles into the home"
    outputs: Outputs = {"state": "Installed" if code == 0 else "Failed", "commit": commit,
                        "target": target, "how": how, "exitCode": code}
    if code != 0:
        outputs["output"] = _redacted(output, cell.spec)
    return outputs


def _install_command(clone: Path, wanted: Dotfiles) -> str | None:
    """The repository file to run: installCommand (which must be one), else the first of
    SCRIPTS there, else None (link the dotfiles). Judged in the host's clone without
    following a link: a link is no install script here."""
    if wanted.install_command is not None:
        if not _regular_file(clone, wanted.install_command):
            raise BackendRefused(f"dotfiles {wanted.source.shown}: installCommand "
                                 f"{names.printable(wanted.install_command)} is not a file of "
                                 "the repository")
        return wanted.install_command
    return next((script for script in SCRIPTS if _regular_file(clone, script)), None)


def _regular_file(root: Path, relative: str) -> bool:
    """Whether `relative` is a regular file under `root`, each part a real directory (lstat:
    no link followed on the way)."""
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return False
    here = root
    for i, part in enumerate(parts):
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except OSError:
            return False
        if i < len(parts) - 1 and not stat.S_ISDIR(mode):
            return False
    return stat.S_ISREG(mode)


def _unpack(backend: interactive.Interactive, cell: CellRef, clone: Path) -> str:
    """The clone sent into the cell as a tar stream; where it went (the resolved target)."""
    import tarfile  # only here: the controllers import this module on every reconcile

    read_fd, write_fd = os.pipe()
    failed: list[BaseException] = []

    def send() -> None:
        try:
            with os.fdopen(write_fd, "wb") as pipe, tarfile.open(fileobj=pipe, mode="w|",
                                                                 format=tarfile.PAX_FORMAT) as tar:
                tar.add(str(clone), arcname=".", filter=_anonymous)
        except BrokenPipeError:
            pass  # the cell's tar stopped reading: its exit status says why
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failed.append(exc)

    writer = threading.Thread(target=send, name="devcell-dotfiles-tar", daemon=True)
    writer.start()
    wanted = of_spec(cell.spec)
    target = wanted.target if wanted else DEFAULT_TARGET
    out, err = _Tail(TAIL_BYTES), _Tail(TAIL_BYTES)
    with os.fdopen(read_fd, "rb") as stdin:
        code, expired = _deadline(lambda options: backend.exec(
            cell, ["/bin/sh", "-c", _UNPACK, "sh", target, MARKER,
                   *security.host_written(cell.spec)],
            stdout=cast(BinaryIO, out), stderr=cast(BinaryIO, err), stdin=stdin,
            options=options))
    writer.join(timeout=INSTALL_SECONDS)
    if expired:
        raise BackendError(f"putting the dotfiles in cell {cell.name} took over "
                           f"{INSTALL_SECONDS:g} s; it was stopped")
    if failed:
        raise BackendError(f"sending the dotfiles into cell {cell.name}: {failed[0]}")
    if code != 0:
        said = names.printable(_redacted(err.text() or out.text(), cell.spec)[-300:])
        raise BackendRefused(f"putting the dotfiles at {names.printable(target)} in cell "
                             f"{cell.name} failed (exit {code}): {said or 'no output'}")
    lines = out.text().splitlines()
    if not lines:
        raise BackendError(f"putting the dotfiles in cell {cell.name}: the cell did not say "
                           "where they went")
    return lines[-1]


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """No host user or group carried into the cell (its tar extracts as the cell's user)."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _run(backend: interactive.Interactive, cell: CellRef, args: list[str]) -> tuple[int, str]:
    """The install, as the cell's user, stopped after INSTALL_SECONDS: (exit status, the
    tail of its output, both streams in the order they came)."""
    tail = _Tail(TAIL_BYTES)
    code, expired = _deadline(lambda options: backend.exec(
        cell, ["/bin/sh", "-c", _INSTALL, "sh", *args], stdout=cast(BinaryIO, tail),
        stderr=cast(BinaryIO, tail), options=options))
    if expired:
        tail.write(f"\n(stopped: the install ran over {INSTALL_SECONDS:g} s)".encode())
        code = code or 124
    return code, tail.text()


def _deadline(call: Callable[[interactive.ExecOptions], int]) -> tuple[int, bool]:
    """`call` with exec options whose hang-up ends the command (and what it started) after
    INSTALL_SECONDS: what the cell runs never holds the operation for ever. (its exit
    status, whether it was stopped)."""
    hang_up = threading.Event()
    timer = threading.Timer(INSTALL_SECONDS, hang_up.set)
    timer.daemon = True
    timer.start()
    try:
        code = call(interactive.ExecOptions(hang_up=hang_up))
    finally:
        timer.cancel()
    return code, hang_up.is_set()


def _redacted(text: str, spec: dict[str, Any]) -> str:
    """`text` with every secret value of the cell's environment replaced (a script that
    prints one must not have it recorded)."""
    for value in supervisor.split_env(spec)[1].values():
        if len(value) >= 4:
            text = text.replace(value, "<redacted>")
            text = _cut_secret_redacted(text, value)
    return text


def _cut_secret_redacted(text: str, value: str) -> str:
    """`text` is a tail: it may begin inside a secret the output held whole (the cut fell
    in it), which `replace` does not see. That last part of the secret is redacted too."""
    start = text.lstrip("\ufffd")  # a character cut in two by the tail
    for length in range(len(value) - 1, MIN_FRAGMENT - 1, -1):
        if start.startswith(value[-length:]):
            return "<redacted>" + start[length:]
    return text


class _Tail:
    """A binary stream keeping only the last `limit` bytes written to it: what the cell
    prints costs the host a constant, however much it prints."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = b""
        self._lock = threading.Lock()

    def write(self, chunk: bytes) -> int:
        with self._lock:
            self.data = (self.data + bytes(chunk[-self.limit:]))[-self.limit:]
        return len(chunk)

    def flush(self) -> None:
        return None

    def text(self) -> str:
        return self.data.decode(errors="replace").strip()

