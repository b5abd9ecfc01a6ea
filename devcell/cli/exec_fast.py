"""`devcell exec` without argparse, for the command lines the fast path covers
(api/exec_fast.py): `[--state-dir DIR] exec [-i] [-e NAME=VALUE]... [-w DIR] CELL [--] CMD...`.

Building exec's parser and importing the command table costs more than the fast path's whole
budget, so main() asks here first. A command line is recognised only when argparse and
cmd_exec.run_exec would read it the same way and accept it; anything else (-t, -u, -v, help,
an abbreviation, a value that looks like an option, a usage error) is None, and main() parses
it as every command is parsed: the same words, the same errors.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs ~2 ms to import; mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Iterator

_VALUED = {"-e": "env", "--env": "env", "-w": "workdir", "--workdir": "workdir",
           "--state-dir": "state_dir"}
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_REST = _NAME_START | frozenset("0123456789")


class Request:
    """An exec command line the fast path covers, as cmd_exec would have read it."""

    __slots__ = ("state_dir", "cell", "argv", "stdin", "env", "workdir")

    def __init__(self) -> None:
        self.state_dir: str | None = None
        self.cell = ""
        self.argv: list[str] = []
        self.stdin = False
        self.env: list[str] = []
        self.workdir: str | None = None


def parse(given: list[str]) -> Request | None:
    """The request `given` makes, or None when it is not one this path covers."""
    request = Request()
    words = iter(given)
    for word in words:  # global options, up to the command word
        if word == "exec":
            break
        if not _option(request, word, words, allowed=("state_dir",)):
            return None
    else:
        return None
    for word in words:  # exec's options, up to the cell
        if not word.startswith("-"):
            request.cell = word
            break
        if word in ("-i", "--stdin"):
            request.stdin = True
        elif not _option(request, word, words, allowed=("env", "workdir", "state_dir")):
            return None
    else:
        return None
    argv = list(words)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or ("--" in argv and all(w.startswith("-") for w in argv[:argv.index("--")])):
        return None  # run_exec's usage errors
    if request.stdin and sys.stdin is None:
        return None
    request.argv = argv
    return request if _valid(request) else None


def _option(request: Request, word: str, words: Iterator[str], *, allowed: tuple[str, ...]) -> bool:
    """Take one option with its value (`--opt VALUE` or `--opt=VALUE`); False if it is not
    one of `allowed`, or its value could be read otherwise."""
    name, equals, value = word.partition("=")
    field = _VALUED.get(name)
    if field not in allowed or (equals and not name.startswith("--")):
        return False
    if not equals:
        taken = next(words, None)
        if taken is None or taken.startswith("-"):
            return False
        value = taken
    if field == "env":
        request.env.append(value)
    else:
        setattr(request, field, value)
    return True


def _valid(request: Request) -> bool:
    """cmd_exec.exec_options' checks: an invalid -e or -w is its usage error to say."""
    for item in request.env:
        name, sep, value = item.partition("=")
        if (not sep or not name or name[0] not in _NAME_START or not set(name) <= _NAME_REST
                or "\0" in value):
            return False
    workdir = request.workdir
    return workdir is None or (workdir.startswith("/") and "\0" not in workdir)


def run(request: Request) -> int | None:
    """Run the request on the fast path; None: nothing ran, take the full path."""
    from devcell.api import exec_fast
    from devcell.store import state_dir

    where = state_dir.location(request.state_dir)
    if where is None:
        return None
    return exec_fast.run(where, request.cell, request.argv,
                         stdin=sys.stdin.buffer if request.stdin else None,
                         env=request.env or None, workdir=request.workdir)
