"""`devcell exec`'s command line read without argparse (cli/exec_fast.py): every line it
takes, argparse and cmd_exec read the same way; every other line is left to them."""

from __future__ import annotations

import pytest

from devcell.cli import cmd_exec, exec_fast
from devcell.cli.parser import parse
from devcell.errors import UsageError

TAKEN = [
    ["exec", "box", "--", "true"],
    ["exec", "box", "true"],
    ["exec", "box", "--", "sh", "-c", "echo hi; exit 3"],
    ["exec", "-i", "box", "--", "cat"],
    ["exec", "--stdin", "box", "--", "cat"],
    ["exec", "-e", "A=1", "--env", "B_2=x=y", "--env=C=", "box", "--", "env"],
    ["exec", "-w", "/tmp", "box", "--", "pwd"],
    ["exec", "--workdir=/work space", "box", "--", "pwd"],
    ["--state-dir", "/tmp/s", "exec", "box", "--", "true"],
    ["--state-dir=/tmp/s", "exec", "--state-dir", "/tmp/t", "box", "--", "true"],
    ["exec", "box", "--", "ls", "--", "-l"],
    ["exec", "box", "-x", "y", "--", "z"],  # cmd_exec runs `-x y -- z`, as argparse reads it
    ["exec", "exec", "--", "true"],
    ["exec", "cell_01m914pabpdw9jc5ye", "--", "true"],
]
LEFT = [
    ["exec", "-t", "box", "--", "sh"],
    ["exec", "-it", "box", "--", "sh"],
    ["exec", "-u", "1000", "box", "--", "id"],
    ["exec", "-v", "box", "--", "true"],
    ["-v", "exec", "box", "--", "true"],
    ["exec", "--help"],
    ["exec", "box"],
    ["exec", "box", "--"],
    ["exec", "box", "--", "--", "true"],
    ["exec", "box", "-i", "--", "cat"],  # options after the cell: run_exec's usage error
    ["exec", "-e", "1A=x", "box", "--", "env"],
    ["exec", "-e", "A", "box", "--", "env"],
    ["exec", "-e", "A=\0", "box", "--", "env"],
    ["exec", "-w", "relative", "box", "--", "pwd"],
    ["exec", "-e", "-x", "box", "--", "env"],
    ["exec", "-eA=1", "box", "--", "env"],
    ["exec", "--std", "box", "--", "cat"],  # an abbreviation: argparse's to read
    ["exec", "--run-store", "file", "box", "--", "true"],
    ["exec", "--", "box", "--", "true"],
    ["exec"],
    ["get", "cells", "exec"],
    ["--state-dir"],
]


def _as_cmd_exec_reads(words: list[str]) -> tuple[object, ...] | None:
    """What argparse and cmd_exec make of `words`, or None where they refuse it."""
    try:
        args = parse(words)
        argv = cmd_exec.command(args)
        options = cmd_exec.exec_options(args)
    except (SystemExit, UsageError):
        return None
    if args.tty or args.user or args.verbose or args.run_store:
        return ("not for the fast path",)
    env = [f"{name}={value}" for name, value in options.env] if options else []
    return (args.state_dir, args.cell, argv, args.stdin, env,
            options.workdir if options else None)


@pytest.mark.parametrize("words", TAKEN + LEFT, ids=lambda w: " ".join(w))
def test_a_line_it_takes_is_read_as_argparse_and_cmd_exec_read_it(words: list[str]) -> None:
    request = exec_fast.parse(words)
    if words in TAKEN:
        assert request is not None
    else:
        assert request is None
    if request is not None:
        assert _as_cmd_exec_reads(words) == (request.state_dir, request.cell, request.argv,
                                             request.stdin, request.env, request.workdir)


def test_without_a_standard_input_exec_i_is_left_to_the_usage_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", None)
    assert exec_fast.parse(["exec", "-i", "box", "--", "cat"]) is None
    assert exec_fast.parse(["exec", "box", "--", "true"]) is not None


def test_a_refused_env_never_shows_its_value() -> None:
    """`-e API-KEY=s3cret` is refused for its name; the value may be a secret and is not
    printed (nor by the API's exec route, which reads the same words: server/streams.py)."""
    from starlette.datastructures import QueryParams

    from devcell.server import streams

    args = parse(["exec", "-e", "API-KEY=s3cret", "box", "--", "env"])
    with pytest.raises(UsageError) as direct:
        cmd_exec.exec_options(args)
    with pytest.raises(UsageError) as served:
        streams.parse(QueryParams([("command", "env"), ("env", "API-KEY=s3cret")]))
    for said in (str(direct.value), str(served.value)):
        assert "API-KEY=…" in said and "s3cret" not in said
