"""The CLI fuzzed from its own command table (issue 31, the class test): every verb, with
every flag and positional of its parser given odd values (times and durations out of range,
huge and negative numbers, empty strings, NULs and control characters, paths that are
files, directories, FIFOs, links, missing or unwritable), against state directories of each
kind. Whatever the command line, a run ends with exit 0, 1 or 2, no traceback, within its
time limit, a refusal says so on an `error:` line with nothing unescaped in it, and a refused
command leaves the state directory as it was.

The CLI runs in this process (`devcell.cli.main.main`): thousands of command lines cost
seconds, where a subprocess each would cost minutes. Each run has a time limit (SIGALRM
raises an exception the CLI does not catch), its own copy of a small state directory (a fake
cell `api`, its snapshot `snap1`), empty standard input, and this test's temporary folder as
its working directory. Only the fake backend is used: no container is ever started.
Hypothesis is derandomized, so CI sees the same command lines every run.

Left out, and why: `controller run` (a daemon: a good command line runs until stopped),
`get -w` (the same), `image build-base` and `image prune` (they build and remove engine
images).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcell.cli import commands
from devcell.cli.parser import build_parser
from tests.cli.inprocess import run as _run
from tests.conftest import db_fingerprint

LEFT_OUT = {("controller", "run"), ("image", "build-base"), ("image", "prune")}
NO_FLAGS = {"--watch", "-w", "--help", "-h", "--state-dir", "--run-store", "--server",
            "--context", "--token-file", "--certificate-authority"}
"""Flags the fuzz never gives: -w watches for ever, --server and its kin would send a command
to a server that is not there (tests/cli/test_contexts.py covers them), the others the
harness sets itself."""
BLOCKING = {("wait",)}
"""Commands that wait as asked: one that reaches its own --timeout is not a hang."""

TIMES = ["0", "0s", "-1s", "1s", "5m", "1h30m", "7d", "99999999999999h", "1e400", "nan", "inf",
         "-inf", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00",
         "2026-01-02T03:04:05Z", "2026-13-45T99:99:99Z", "1.5", "00:00"]
NUMBERS = ["-1", "0", "1", "64", "65", "65536", "9223372036854775808", "9" * 400,
           "-99999999999999999999", "0x10", "1_000", "\u0663", "\u00b2", "+5", " 7"]
STRINGS = ["", " ", "\0", "a\0b", "\x1b[31mred", "\n", "a\nb", "\t", "\u202eevil", "é",
           "-", "--", "Not_A_Name", "a" * 300, "api", "snap1", "apj", "nope", "cell_0",
           "op_0", "snap_0", "cell/api", "condition=Ready", "condition=Ready=Maybe", "delete",
           "x=y", "team=core", "8080", "8080:80", ":80", "127.0.0.1", "::1", "jsonpath={.x",
           "custom-columns=A:.metadata.name", "yaml", "json", "wide", "name", "cells",
           "snapshots", "cell", "snapshot", "operations", "events", "volumes", "config",
           "cell.spec.services", "bash", "sh", "true"]
PATH_KINDS = ["file", "manifest", "garbage", "directory", "fifo", "link", "dangling",
              "missing", "missing/dir/f", "unwritable/f", "archive", "devnull", "devcontainer"]
PATH_PREFIXES = ["jsonpath-file=", "custom-columns-file=", "confirm=", "file://"]
STATE_KINDS = ["normal", "missing", "empty", "file", "fifo", "link", "dangling", "no-db"]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


TOP = _subparsers(build_parser())
ENTRIES = [entry for entry in commands.TABLE if entry.words not in LEFT_OUT]


def _parser(words: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = TOP[words[0]]
    return _subparsers(parser)[words[1]] if len(words) == 2 else parser


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0 and not isinstance(
        action, argparse._StoreConstAction | argparse._CountAction | argparse.BooleanOptionalAction)


@dataclass(frozen=True)
class Path_:
    """A path of one kind, made inside the run's folder when the run starts."""

    kind: str
    prefix: str = ""
    """Written before the path: `jsonpath-file=` makes `-o jsonpath-file=PATH`."""


Value = str | Path_


PLAUSIBLE = ["api", "snap1", "cells", "cell", "snapshots", "snapshot", "5s", "1", "2",
             "yaml", "json", "condition=Ready", "team=core"]
"""Values a command line often holds, so that runs get past parsing into the commands."""


def _values(action: argparse.Action) -> st.SearchStrategy[Value]:
    plausible: list[Value] = [str(c) for c in action.choices or ()] or list(PLAUSIBLE)
    if action.dest in ("filename", "file", "path", "output", "input_file", "manifests"):
        plausible = [Path_(kind) for kind in PATH_KINDS] + ["-"]
    odd: st.SearchStrategy[Value] = st.one_of(
        st.sampled_from(TIMES), st.sampled_from(NUMBERS), st.sampled_from(STRINGS),
        st.sampled_from(PATH_KINDS).map(Path_),
        st.builds(Path_, st.sampled_from(PATH_KINDS), st.sampled_from(PATH_PREFIXES)),
        st.text(st.characters(codec="utf-8"), max_size=6))
    return st.one_of(st.sampled_from(plausible), odd)


@st.composite
def command_lines(draw: st.DrawFn) -> list[Value]:
    entry = draw(st.sampled_from(ENTRIES))
    argv: list[Value] = list(entry.words)
    tail: list[Value] = []
    for action in _parser(entry.words)._actions:
        options = [o for o in action.option_strings if o not in NO_FLAGS]
        if action.option_strings and not options or isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:  # a positional
            counts: dict[object, int] = {None: 1, "?": draw(st.integers(0, 1)),
                                         "*": draw(st.integers(0, 2)),
                                         "+": draw(st.integers(1, 2))}
            count = counts.get(action.nargs, draw(st.integers(0, 2)))
            values = [draw(_values(action)) for _ in range(count)]
            if action.nargs == argparse.REMAINDER:
                tail = ["--", *values] if values else []
            else:
                argv.extend(values)
            continue
        if not draw(st.integers(0, 3)) == 0 and not (action.required and draw(st.integers(0, 7))):
            continue  # each flag in a quarter of the runs; a required one in 7 of 8
        argv.append(draw(st.sampled_from(options)))
        if _takes_value(action):
            argv.append(draw(_values(action)))
    return argv + tail


# -- the world each run sees -------------------------------------------------------------

CELL = """apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {name: api, labels: {team: core}}
spec: {backend: fake}
"""


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state directory with a fake cell and its snapshot, and that snapshot's archive."""
    root = tmp_path_factory.mktemp("fuzz-base")
    (root / "cell.yaml").write_text(CELL)
    state = root / "state"
    for argv in (["apply", "-f", str(root / "cell.yaml")],
                 ["snapshot", "create", "api", "--name", "snap1"],
                 ["snapshot", "export", "snap1", "-o", str(root / "snap1.tar")]):
        code, out, err = _run(["--state-dir", str(state), *argv], root)
        assert code == 0, (argv, out, err)
    return root


def _make_path(folder: Path, kind: str, base: Path) -> str:
    path = folder / f"p-{kind.replace('/', '-')}"
    if kind == "file":
        path.write_text("hello\n")
    elif kind == "manifest":
        path.write_text(CELL.replace("name: api", "name: other"))
    elif kind == "garbage":
        path.write_bytes(b"\0\xff{[: \x1b")
    elif kind == "directory":
        path.mkdir(exist_ok=True)
    elif kind == "fifo":
        if not path.exists():
            os.mkfifo(path)
    elif kind == "link":
        path.unlink(missing_ok=True)
        path.symlink_to(base / "cell.yaml")
    elif kind == "dangling":
        path.unlink(missing_ok=True)
        path.symlink_to(folder / "nowhere")
    elif kind in ("missing", "missing/dir/f"):
        return str(folder / kind)
    elif kind == "unwritable/f":
        locked = folder / "unwritable"
        locked.mkdir(exist_ok=True)
        locked.chmod(0o500)
        return str(locked / "f")
    elif kind == "archive":
        return str(base / "snap1.tar")
    elif kind == "devnull":
        return os.devnull
    elif kind == "devcontainer":
        path.write_text('{"name": "dc", "image": "devcell/busybox:latest", '
                        '"runArgs": ["--cpus", "-1"]}')
    return str(path)


def _make_state(folder: Path, kind: str, base: Path) -> Path:
    state = folder / "state"
    if kind in ("normal", "link", "dangling"):
        target = folder / "real-state"
        if kind != "dangling":
            shutil.copytree(base / "state", target, symlinks=True)
        if kind == "normal":
            target.rename(state)
        else:
            state.symlink_to(target)
    elif kind == "empty":
        state.mkdir()
    elif kind == "file":
        state.write_text("not a directory\n")
    elif kind == "fifo":
        os.mkfifo(state)
    elif kind == "no-db":
        shutil.copytree(base / "state", state, symlinks=True)
        (state / "state.db").unlink()
    return state


def _tree(state: Path) -> object:
    """What a command could change in a state directory: its database's rows and its files
    (names, kinds, sizes), without following links out of it."""
    try:
        mode = os.lstat(state).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(mode) or not os.access(state, os.R_OK | os.X_OK):
        return stat.S_IFMT(mode)
    files = []
    for root, dirs, names in os.walk(state):
        for name in sorted(dirs + names):
            if name.endswith(("-wal", "-shm", "-journal")) or name == "lease":
                continue  # SQLite's own journal files come and go with every reader
            path = Path(root, name)
            info = path.lstat()
            files.append((str(path.relative_to(state)), stat.S_IFMT(info.st_mode),
                          info.st_size if stat.S_ISREG(info.st_mode) and
                          name != "state.db" else 0))
    database = db_fingerprint(state) if (state / "state.db").is_file() else None
    return sorted(files), database


_BEFORE: dict[tuple[Path, str], object] = {}


def _tree_before(state: Path, kind: str, base: Path) -> object:
    """_tree() of a state directory _make_state just made: every one of a kind is a byte copy
    of `base` (or the same link, file, FIFO), so its tree is taken once per kind, from the
    first, instead of for each run (the walk and the database's dump were a quarter of a
    run's time)."""
    if (base, kind) not in _BEFORE:
        _BEFORE[(base, kind)] = _tree(state)
    return _BEFORE[(base, kind)]


def _refused_properly(code: int | str, out: str, err: str) -> str | None:
    """What is wrong with how a run ended, or None."""
    if not isinstance(code, int):
        return f"ended with {code}"
    if code not in (0, 1, 2):
        return f"exit {code}"
    if "Traceback" in err:
        return "a traceback"
    if any(ch in err for ch in "\0\x1b\r\u202e") or any(
            ord(ch) < 32 and ch not in "\n\t" for ch in err):
        return "an unescaped control character on stderr"
    if code != 0 and not out.strip() and not any(
            line.startswith(("error:", "warning:")) or " not found" in line
            for line in err.splitlines()):
        return "a refusal without an error: line"
    return None


def _check(argv: list[Value], state_kind: str, base: Path, folder: Path) -> None:
    folder.mkdir()
    session_contexts = os.environ.get("DEVCELL_CONTEXTS")
    # Its own contexts file: `context use --none` or `context delete` make one, and a file
    # left for the next run (or the tests after the fuzz) changes what their commands import.
    os.environ["DEVCELL_CONTEXTS"] = str(folder / "contexts.json")
    try:
        state = _make_state(folder, state_kind, base)
        words = [v.prefix + _make_path(folder, v.kind, base) if isinstance(v, Path_) else v
                 for v in argv]
        before = _tree_before(state, state_kind, base)
        code, out, err = _run(["--state-dir", str(state), *words], folder)
        entry = tuple(w for w in argv[:2] if isinstance(w, str))
        if code == "hang" and (entry[:1] in BLOCKING):
            return  # `wait` waits as long as it was told to
        wrong = _refused_properly(code, out, err)
        assert wrong is None, f"{words!r} on a {state_kind} state directory: {wrong}\n{err}"
        if code == 2 or (code == 1 and not out.strip()):
            after = _tree(state)
            assert after == before, (f"{words!r} on a {state_kind} state directory was refused "
                                     f"(exit {code}) but changed it:\n{err}")
    finally:
        if session_contexts is None:
            os.environ.pop("DEVCELL_CONTEXTS", None)
        else:
            os.environ["DEVCELL_CONTEXTS"] = session_contexts
        for root, dirs, _ in os.walk(folder):
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(Path(root, name), 0o700)
        shutil.rmtree(folder, ignore_errors=True)


_COUNTER = iter(range(10**9))


@settings(max_examples=2000, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(argv=command_lines())
def test_any_command_line_on_a_good_state_directory(tmp_path: Path, base: Path,
                                                     argv: list[Value]) -> None:
    _check(argv, "normal", base, tmp_path / f"run{next(_COUNTER)}")


@pytest.mark.parametrize("state_kind", STATE_KINDS[1:])
@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(argv=command_lines())
def test_any_command_line_on_a_state_directory_of_any_kind(
        tmp_path: Path, base: Path, argv: list[Value], state_kind: str) -> None:
    _check(argv, state_kind, base, tmp_path / f"run{next(_COUNTER)}")
