"""The CLI entry point: argument parsing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_building_one_command_parses_exactly_like_the_full_parser() -> None:
    """main() builds only the command it runs; the full parser must know no other command."""
    import argparse

    from devcell.cli import parser as cli_parser

    full = cli_parser.build_parser()
    subactions = [a for a in full._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(subactions[0].choices) == set(cli_parser.COMMANDS)
    for command in cli_parser.COMMANDS:
        one = cli_parser.build_parser(command)
        one_sub = [a for a in one._actions if isinstance(a, argparse._SubParsersAction)][0]
        assert list(one_sub.choices) == [command]
        assert (one_sub.choices[command].format_help()
                == subactions[0].choices[command].format_help())


def test_get_imports_neither_the_library_verbs_nor_the_reconciler(tmp_path: Path) -> None:
    """`devcell get` starts fast because it loads only what it uses (bench/get_cells.py): of
    the api package, only the records it lists and how it prints them (api.listing and
    api.render, which the HTTP API shares)."""
    code = ("import sys; from devcell.cli import main; main.main(['get', 'cells']); "
            "print(sorted(m for m in sys.modules if m.startswith(('devcell.api', "
            "'devcell.reconciler', 'loguru')) and m not in ('devcell.api', "
            "'devcell.api.listing', 'devcell.api.render')), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, DEVCELL_HOME=str(tmp_path / "state")),
                          cwd=REPO, check=True)
    assert proc.stderr.strip().splitlines()[-1] == "[]"


def test_building_one_verb_parses_exactly_like_the_full_parser() -> None:
    """main() builds only the verb it runs (`snapshot create` builds no other snapshot verb):
    VERBS names every verb the full parser has, and each verb alone helps and parses alike."""
    import argparse

    from devcell.cli import parser as cli_parser

    def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(found[0].choices) if found else {}

    full = subparsers(cli_parser.build_parser())
    with_verbs = {name for name, p in full.items() if subparsers(p)}
    assert with_verbs == set(cli_parser.VERBS)
    for command, verbs in cli_parser.VERBS.items():
        assert tuple(subparsers(full[command])) == verbs
        for verb in verbs:
            alone = subparsers(subparsers(cli_parser.build_parser(command, verb))[command])
            assert list(alone) == [verb]
            assert alone[verb].format_help() == subparsers(full[command])[verb].format_help()
    for words in EVERY_COMMAND:  # parse() adds the global options' defaults only
        full_args = vars(cli_parser.build_parser().parse_args(words))
        assert vars(cli_parser.parse(words)).items() >= full_args.items(), words


def test_snapshot_create_imports_neither_loguru_nor_a_pool(tmp_path: Path) -> None:
    """A verb that logs nothing at the default level imports no loguru (devcell.log), no
    thread pool (a converge of one object) and no logging package; with -v it logs as before.
    The container backend's own check (no SDK, no http.client) is in
    tests/backends/container/test_engine_socket.py."""
    env = dict(os.environ, DEVCELL_HOME=str(tmp_path / "state"))
    applied = subprocess.run([sys.executable, "-m", "devcell", "apply", "-f",
                              str(REPO / "examples" / "api.yaml")],
                             capture_output=True, text=True, env=env, cwd=REPO, check=False)
    assert applied.returncode == 0, applied.stderr
    code = ("import sys; from devcell.cli import main; code = main.main(sys.argv[1:]); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'loguru', 'asyncio', "
            "'concurrent', 'logging', 'multiprocessing'}), file=sys.stderr); sys.exit(code)")
    made = subprocess.run([sys.executable, "-c", code, "snapshot", "create", "api", "--name",
                           "s1"], capture_output=True, text=True, env=env, cwd=REPO, check=False)
    assert made.returncode == 0, made.stderr
    assert made.stdout == "snapshot/s1 created\n"
    assert made.stderr.strip().splitlines()[-1] == "[]"
    loud = subprocess.run([sys.executable, "-c", code, "snapshot", "create", "api", "--name",
                           "s2", "-v"], capture_output=True, text=True, env=env, cwd=REPO,
                          check=False)
    assert loud.returncode == 0, loud.stderr
    assert " INFO    Snapshot/s2 op_" in loud.stderr and "'loguru'" in loud.stderr


def test_the_program_ends_with_its_commands_output_and_exit_code(tmp_path: Path) -> None:
    """`devcell` and `python -m devcell` run process_main, which freezes the collector before
    the interpreter exits (so the exit does not walk every object for cycles): a command's
    output still reaches a pipe whole and its exit code is the command's. main() itself,
    run in process by tests and tools, leaves the collector alone."""
    import gc
    import json

    from devcell.cli import main as cli_main

    env = dict(os.environ, DEVCELL_HOME=str(tmp_path / "state"))
    script = Path(sys.executable).parent / "devcell"
    for program in ([str(script)], [sys.executable, "-m", "devcell"]):
        applied = subprocess.run([*program, "apply", "-f", str(REPO / "examples" / "api.yaml")],
                                 capture_output=True, text=True, env=env, check=False)
        assert applied.returncode == 0, applied.stderr
        listed = subprocess.run([*program, "get", "cells", "-o", "json"], capture_output=True,
                                text=True, env=env, check=False)
        assert listed.returncode == 0, listed.stderr
        assert [c["metadata"]["name"] for c in json.loads(listed.stdout)["items"]] == ["api"]
        missing = subprocess.run([*program, "describe", "cell", "nope"], capture_output=True,
                                 text=True, env=env, check=False)
        assert missing.returncode == 1
        assert missing.stderr.startswith("error: ") and "nope" in missing.stderr
    frozen = gc.get_freeze_count()
    assert cli_main.main(["--state-dir", str(tmp_path / "state"), "get", "cells"]) == 0
    assert gc.get_freeze_count() == frozen


_ENDING = """
import atexit, sys, threading, time
where, wait = sys.argv.pop(1), sys.argv.pop(1) == "thread"
atexit.register(lambda: open(where + ".atexit", "w").write("ran"))

if wait:  # a thread that is not a daemon: the process must wait for it
    threading.Thread(target=lambda: (time.sleep(0.3), open(where + ".thread", "w").write("ran"))
                     ).start()
sys.argv[0] = "devcell"
from devcell.cli.main import process_main
sys.exit(process_main())
"""


def test_a_command_ends_after_its_atexit_handlers_and_threads(tmp_path: Path) -> None:
    """process_main ends a command past the interpreter's finalization (its modules' teardown
    costs a few ms) only when no other thread is left: the atexit handlers run either way,
    a thread still running is waited for, and the output and exit code are the command's."""
    for mode in ("alone", "thread"):
        where = str(tmp_path / mode)
        done = subprocess.run([sys.executable, "-c", _ENDING, where, mode, "explain", "cell.spec"],
                              capture_output=True, text=True, cwd=REPO, check=False)
        assert done.returncode == 0, done.stderr
        assert "spec" in done.stdout
        assert Path(where + ".atexit").read_text() == "ran"
        if mode == "thread":  # the interpreter's own exit, which waited for it
            assert Path(where + ".thread").read_text() == "ran"
    missing = subprocess.run([sys.executable, "-c", _ENDING, str(tmp_path / "x"), "alone",
                              "describe", "cell", "nope"], capture_output=True, text=True,
                             cwd=REPO, check=False,
                             env=dict(os.environ, DEVCELL_HOME=str(tmp_path / "state")))
    assert missing.returncode == 1 and missing.stderr.startswith("error: ")
    profiled = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(tmp_path / "prof"),
                               "-m", "devcell", "explain", "cell.spec"], capture_output=True,
                              text=True, cwd=REPO, check=False)
    assert profiled.returncode == 0, profiled.stderr  # a profiler writes after the program:
    assert (tmp_path / "prof").stat().st_size > 0  # the process was not ended under it


# One valid command line per command (and verb): the global options must work around each.
EVERY_COMMAND = [
    ["apply", "-f", "x.yaml"], ["get", "cells"], ["describe", "cell", "api"],
    ["delete", "cell", "api"], ["diff", "-f", "x.yaml"], ["snapshot", "create", "api", "--name", "s"],
    ["snapshot", "list", "api"], ["snapshot", "push", "s", "127.0.0.1:5000/team/s:v1"],
    ["snapshot", "pull", "127.0.0.1:5000/team/s:v1", "--name", "t"],
    ["cell", "fork", "api", "--snapshot", "s", "--name", "b"],
    ["cell", "sleep", "api"], ["cell", "start", "api"], ["wait", "cell", "api"],
    ["controller", "run", "--manifests", "m"], ["op", "resume", "op_1"], ["op", "cancel", "op_1"],
    ["schema", "cell"], ["image", "build-base"], ["exec", "api", "--", "ls"], ["logs", "api"],
    ["port-forward", "api", "8080"], ["gc"],
    ["ssh", "api", "--", "ls"], ["ssh-config"], ["ssh-config", "api"], ["ssh-proxy", "api"],
    ["code", "api", "--print"],
    ["explain", "cell.spec"], ["version"], ["completion", "bash"],
    ["df"], ["df", "-o", "json"],
    ["import", "devcontainer", "-o", "cell.yaml"],
    ["token", "create", "--user", "ana", "--role", "developer"], ["token", "list"],
    ["token", "revoke", "0123456789ab"],
    ["get", "nodes"], ["node", "cordon", "n1"], ["node", "uncordon", "n1"], ["node", "drain", "n1"],
    ["context", "list"], ["context", "use", "prod"], ["context", "use", "--none"],
    ["context", "set", "prod", "--use"], ["context", "delete", "prod"],
]


def _placements(words: list[str], options: list[str]) -> list[list[str]]:
    """The options before the command, after its first word, and at the end (not for exec,
    whose options go before the cell name: everything after it is the command, docs/cli.md)."""
    placed = [options + words, words[:1] + options + words[1:]]
    return placed if "--" in words else [*placed, words + options]


def test_every_command_covers_the_commands() -> None:
    from devcell.cli import parser as cli_parser

    assert {words[0] for words in EVERY_COMMAND} == set(cli_parser.COMMANDS)


def test_global_options_work_before_and_after_every_command() -> None:
    from devcell.cli import parser as cli_parser

    options = ["--state-dir", "/s", "-v", "--run-store=file"]
    for words in EVERY_COMMAND:
        for argv in _placements(words, options):
            args = cli_parser.parse(argv)
            assert (args.command, args.state_dir, args.verbose, args.run_store) == (
                words[0], "/s", 1, "file"), argv
        args = cli_parser.parse(words)
        assert (args.state_dir, args.verbose, args.run_store) == (None, 0, None), words


def test_a_global_option_before_the_command_reaches_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if k != "DEVCELL_HOME"}
    env["HOME"] = str(tmp_path / "home")
    applied = subprocess.run([sys.executable, "-m", "devcell", "--state-dir", str(state), "apply",
                              "-f", str(REPO / "examples" / "api.yaml")],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert applied.returncode == 0, applied.stderr
    listed = subprocess.run([sys.executable, "-m", "devcell", "--state-dir", str(state), "get",
                             "cells", "-o", "name"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert (listed.returncode, listed.stdout) == (0, "cell/api\n"), listed.stderr
    assert not (tmp_path / "home").exists()  # nothing went to the default state directory


def test_durations_every_wait_can_honour_and_no_other() -> None:
    """A duration beyond a lock's TIMEOUT_MAX once killed the daemon's resync thread with
    an OverflowError (the daemon ran on with no resync); it is a usage error now."""
    import argparse
    import threading

    import pytest

    from devcell.cli import arguments

    assert arguments.duration("1h30m") == 5400.0
    assert arguments.duration("0") == 0.0
    assert arguments.duration(f"{int(threading.TIMEOUT_MAX)}") == int(threading.TIMEOUT_MAX)
    for text in ("99999999999999999999h", f"{int(threading.TIMEOUT_MAX) + 1}s", "1" * 400):
        with pytest.raises(argparse.ArgumentTypeError, match="too long"):
            arguments.duration(text)


def _two_cells(tmp_path: Path) -> Path:
    from devcell.api import apply as api

    manifests = tmp_path / "m"
    manifests.mkdir()
    for name, team in (("c1", "t1"), ("c2", "t2")):
        (manifests / f"{name}.yaml").write_text(
            "apiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
            f"metadata: {{name: {name}, labels: {{team: {team}}}}}\nspec: {{backend: fake}}\n")
    state = tmp_path / "state"
    api.apply(state, [str(manifests)])
    return state


def test_a_blank_selector_is_no_selector_and_never_deletes_everything(tmp_path: Path) -> None:
    """kubectl trims -l: `delete cells -l ' '` is `delete cells` (refused), not "delete all"."""
    from devcell.cli import main as cli_main
    from devcell.store import completion

    state = _two_cells(tmp_path)
    for argv in (["delete", "cells", "-l", " "], ["wait", "cells", "-l", "\t"]):
        assert cli_main.main(["--state-dir", str(state), *argv]) == 2
    assert completion.names(state, "cells") == ["c1", "c2"]


def test_names_with_a_selector_are_refused_as_kubectl_does(tmp_path: Path) -> None:
    """`delete cells c1 -l team=t2` must not delete c1 and c2; `get` must not say c1 is not
    found: kubectl refuses a name with a selector."""
    from devcell.cli import main as cli_main
    from devcell.store import completion

    state = _two_cells(tmp_path)
    for verb in ("get", "delete"):
        assert cli_main.main(["--state-dir", str(state), verb, "cells", "c1",
                              "-l", "team=t2"]) == 2
    assert completion.names(state, "cells") == ["c1", "c2"]


def test_a_closed_standard_output_or_error_is_said_not_a_traceback(tmp_path: Path) -> None:
    """`devcell ... >&-`: the interpreter's sys.stdout is None, and every command printing (or
    main flushing) met AttributeError, a traceback (attack44). Printing is the output's error
    now, in words; a command that prints nothing succeeds; with no error stream the exit code
    still tells."""
    env = dict(os.environ, DEVCELL_HOME=str(tmp_path / "state"), PYTHONPATH=str(REPO))

    def run(redirect: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable,
                               "-m", "devcell", *argv], capture_output=True, text=True,
                              env=env, cwd=REPO)

    printed = run(">&-", "version")
    assert printed.returncode == 1, printed
    assert printed.stderr == "error: cannot write the output: Bad file descriptor\n"
    quiet = run(">&-", "get", "cells")
    assert (quiet.returncode, quiet.stderr) == (0, "No resources found.\n")
    refused = run("2>&-", "get", "cells", "-o", "bogus")
    assert (refused.returncode, refused.stdout) == (2, "")
