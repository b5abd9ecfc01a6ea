"""Entry point of `devcell`: argument parsing and error-to-exit-code mapping.

Command modules are imported only when their command runs, so `devcell get` pays for
nothing it does not use. Exit codes: 0 success, 1 failure, 2 usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from devcell import __version__, kinds
from devcell.errors import DevCellError, ManifestError
from devcell.names import printable_lines

OBJECT_KINDS = kinds.words()
"""What a user may type for a kind of desired object (cell, cells, snap...) -> its name."""
GET_KINDS = {
    **{word: kinds.get(name).plural for word, name in OBJECT_KINDS.items()},
    "volume": "volumes", "volumes": "volumes", "vol": "volumes",
    "operation": "operations", "operations": "operations", "op": "operations", "ops": "operations",
    "event": "events", "events": "events", "ev": "events",
    "controller": "controllers", "controllers": "controllers",
}


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(2)


def _kind(table: dict[str, str]) -> Callable[[str], str]:
    def convert(value: str) -> str:
        key = value.lower()
        if key not in table:
            raise argparse.ArgumentTypeError(
                f"unknown resource type {value!r} (one of: {', '.join(sorted(set(table)))})")
        return table[key]
    convert.words = sorted(table)  # type: ignore[attr-defined]  # what completion offers
    return convert


def _workers(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise argparse.ArgumentTypeError(f"invalid worker count {text!r} (a whole number 1-64)")
    return int(text)


def _duration(text: str) -> float:
    """kubectl durations: 30s, 5m, 1h30m, 250ms, or plain seconds."""
    import re
    import threading

    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text!r} (e.g. 30s, 5m, 1h30m)")
        scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
        seconds = sum(float(n) * scale[u] for n, u in parts)
    # Every wait ends in a lock's timeout, which overflows beyond TIMEOUT_MAX (292 years):
    # refused here, not as a traceback in a daemon thread that then dies silently.
    if seconds > threading.TIMEOUT_MAX:
        raise argparse.ArgumentTypeError(
            f"duration {text!r} is too long (at most {int(threading.TIMEOUT_MAX)}s)")
    return seconds


VERBS = {"snapshot": ("create", "export", "import", "restore", "list"),
         "cell": ("fork", "sleep", "start"), "controller": ("run",), "op": ("resume", "cancel"),
         "image": ("build-base", "ls", "prune"), "import": ("devcontainer",)}
"""The verbs of the commands that take one (tests/cli/test_main.py checks them against the
parser), so a command line's verb is known before its parser is built."""
COMMANDS = ("apply", "get", "describe", "delete", "diff", "snapshot", "cell", "wait",
            "controller", "op", "schema", "image", "exec", "logs", "gc", "explain", "version",
            "completion", "df", "import")


class _Skipped:
    """Stands in for the parser of a command this run does not use (every call is a no-op):
    argparse is slow to build, and building all fifteen commands cost every start ~4 ms."""

    required = True

    def __getattr__(self, name: str) -> Any:
        return self._ignore

    def _ignore(self, *args: Any, **kwargs: Any) -> _Skipped:
        return self


class _Commands:
    """add_subparsers(), adding only the command (or verb) `only` (all of them when None)."""

    def __init__(self, sub: Any, only: str | None) -> None:
        self.sub, self.only = sub, only

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if self.only is not None and name != self.only:
            return _Skipped()
        return self.sub.add_parser(name, **kwargs)


GLOBAL_DEFAULTS: dict[str, Any] = {"state_dir": None, "verbose": 0, "run_store": None}
"""The options every command takes, before or after the command's words, and their defaults."""
GLOBAL_WITH_VALUE = ("--state-dir", "--run-store")


def _global_options(parser: argparse.ArgumentParser) -> None:
    """Add the global options to `parser` without defaults of their own (SUPPRESS): a value
    given at any level (`devcell --state-dir X get`, `devcell get --state-dir X`) survives the
    levels below it; `parse` fills in GLOBAL_DEFAULTS for the options nobody gave."""
    parser.add_argument("--state-dir", default=argparse.SUPPRESS,
                        help="state directory (default: $DEVCELL_HOME or ~/.local/share/devcell)")
    parser.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="more log output")
    parser.add_argument("--run-store", choices=["sqlite", "file"], default=argparse.SUPPRESS,
                        help="where suspended operations keep their run snapshots "
                             "(default: sqlite in the state directory; or $DEVCELL_RUN_STORE)")


def build_parser(only: str | None = None, verb: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; with `only`, just that command's, and with `verb`, just that verb's
    of it (faster: argparse is slow to build; the same behaviour for the words given)."""
    common = Parser(add_help=False)
    _global_options(common)

    parser = Parser(prog="devcell", description="Isolated development environments, declared in YAML.")
    parser.add_argument("--version", action="version", version=f"devcell {__version__}")
    _global_options(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    subparsers.required = True
    sub = _Commands(subparsers, only)

    p = sub.add_parser("apply", parents=[common], help="record manifests as desired state and converge")
    p.add_argument("-f", "--filename", action="append", required=True,
                   help="file, directory (recursive) or - for stdin; repeatable")
    p.add_argument("--dry-run", action="store_true", help="validate and show what would change")
    p.add_argument("--prune", action="store_true",
                   help="delete objects applied from these paths whose manifests are gone")
    p.add_argument("-l", "--selector", metavar="SELECTOR",
                   help="with --prune: prune only objects whose labels match")
    p.add_argument("--timeout", type=_duration, default=300.0,
                   help="how long to wait for convergence (e.g. 90s, 5m; default 5m)")
    p.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                   help="with a daemon running, wait until the objects are Ready (default on)")
    p.add_argument("--approve", action="store_true",
                   help="pass approval gates up front (e.g. deleting unsaved work)")
    p.add_argument("--workers", type=_workers, default=None, metavar="N",
                   help="objects reconciled at once without a daemon (default: what the "
                        "backends suit: 8 for container, 1 for fake)")

    p = sub.add_parser("get", parents=[common], help="list objects")
    p.add_argument("kind", type=_kind(GET_KINDS), metavar="KIND",
                   help="cells, snapshots, volumes, operations or events")
    p.add_argument("names", nargs="*", metavar="NAME", help="names or ids (default: all)")
    p.add_argument("-o", "--output", default="table", metavar="FORMAT", type=_get_output,
                   help="table, wide, yaml, json, name, jsonpath=TEMPLATE, jsonpath-file=FILE, "
                        "custom-columns=HEADER:PATH,..., custom-columns-file=FILE")
    _selector_option(p)
    p.add_argument("--field-selector", metavar="SELECTOR",
                   help="e.g. status.phase=Running,spec.backend!=fake (cells: metadata.name, "
                        "metadata.id, status.phase, spec.backend, spec.state; snapshots: "
                        "metadata.name, metadata.id, status.phase, spec.cell)")
    p.add_argument("--sort-by", metavar="JSONPATH",
                   help="order items by a field, e.g. .metadata.creationTimestamp")
    p.add_argument("--no-headers", action="store_true", help="tables without the header line")
    p.add_argument("--show-labels", action="store_true", help="add a LABELS column")
    p.add_argument("-L", "--label-columns", action="append", metavar="KEY[,KEY2]",
                   help="add a column with each label's value; repeatable")
    p.add_argument("-w", "--watch", action="store_true",
                   help="after listing, print rows again as they change (Ctrl-C to stop)")
    p.add_argument("--tree", action="store_true",
                   help="snapshots: lineage as a tree (cell -> snapshots -> forks -> ...)")
    p.add_argument("--for", dest="for_object", metavar="KIND/NAME",
                   help="events: only those of one object, e.g. --for cell/api")

    p = sub.add_parser("describe", parents=[common], help="show an object in detail")
    p.add_argument("kind", type=_kind({**OBJECT_KINDS, "operation": "Operation",
                                       "op": "Operation", "operations": "Operation"}),
                   metavar="KIND", help="cell, snapshot or operation")
    p.add_argument("names", nargs="*", metavar="NAME", help="names or ids")
    _selector_option(p)

    p = sub.add_parser("delete", parents=[common], help="delete objects")
    p.add_argument("kind", nargs="?", type=_kind(OBJECT_KINDS), metavar="KIND")
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("-f", "--filename", action="append", help="delete the objects in these files")
    _selector_option(p)
    p.add_argument("--timeout", type=_duration, default=300.0)
    p.add_argument("--approve", action="store_true",
                   help="delete even a workspace that changed since its last snapshot")
    p.add_argument("--workers", type=_workers, default=None, metavar="N",
                   help="objects reconciled at once without a daemon (default: by backend)")

    p = sub.add_parser("diff", parents=[common], help="show what apply would change")
    p.add_argument("-f", "--filename", action="append", required=True)

    p = sub.add_parser("snapshot", parents=[common], help="snapshot verbs")
    ssub = p.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    ssub.required = True
    ssub = _Commands(ssub, verb)
    sp = ssub.add_parser("create", parents=[common], help="checkpoint a cell")
    sp.add_argument("cell")
    sp.add_argument("--name", required=True)
    sp.add_argument("--ttl", default=None,
                    help="expire the snapshot this long after it is created (30m, 12h, 7d)")
    sp.add_argument("--consistency", choices=("filesystem", "machine"), default=None,
                    help="machine: keep memory and processes too (vm cells); forks resume them")
    sp.add_argument("--timeout", type=_duration, default=300.0)
    sp = ssub.add_parser("export", parents=[common],
                         help="write a snapshot as a self-describing archive")
    sp.add_argument("snapshot")
    sp.add_argument("-o", "--output", required=True, metavar="FILE",
                    help="the archive to write (- for standard output)")
    sp = ssub.add_parser("import", parents=[common],
                         help="bring in a snapshot archive as a Ready snapshot")
    sp.add_argument("file", metavar="FILE", help="the archive (- for standard input)")
    sp.add_argument("--name", default=None, help="the snapshot's name here (default: its "
                                                 "name in the archive)")
    sp = ssub.add_parser("restore", parents=[common],
                         help="roll a cell's workspace back to a snapshot, in place")
    sp.add_argument("snapshot")
    sp.add_argument("--cell", default=None,
                    help="the cell to restore (default: the snapshot's own; a fork may go "
                         "back to the snapshot it was forked from)")
    sp.add_argument("--no-safety-snapshot", dest="safety", action="store_false",
                    help="do not snapshot the workspace first (its changes are then lost)")
    sp.add_argument("--approve", action="store_true",
                    help="restore even over a workspace that changed since its last snapshot")
    sp.add_argument("--dry-run", action="store_true",
                    help="show what would be done and replaced; change nothing")
    sp.add_argument("--timeout", type=_duration, default=300.0)
    sp = ssub.add_parser("list", parents=[common], help="a cell's snapshots")
    sp.add_argument("cell")
    sp.add_argument("-o", "--output", choices=["table", "wide", "yaml", "json", "name"],
                    default="table")

    p = sub.add_parser("cell", parents=[common], help="cell verbs")
    csub = p.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    csub.required = True
    csub = _Commands(csub, verb)
    cp = csub.add_parser("fork", parents=[common], help="new cell from a snapshot of a cell")
    cp.add_argument("cell")
    cp.add_argument("--snapshot", required=True)
    cp.add_argument("--name", required=True)
    cp.add_argument("--timeout", type=_duration, default=300.0)
    for word, text in (("sleep", "checkpoint the workspace, then stop"),
                       ("start", "start a stopped or sleeping cell")):
        cp = csub.add_parser(word, parents=[common], help=text)
        cp.add_argument("cell")
        cp.add_argument("--timeout", type=_duration, default=300.0)

    p = sub.add_parser("wait", parents=[common], help="wait for a condition on an object")
    p.add_argument("kind", type=_kind(OBJECT_KINDS), metavar="KIND")
    p.add_argument("names", nargs="*", metavar="NAME")
    _selector_option(p)
    p.add_argument("--for", dest="condition", default="condition=Ready",
                   help="condition=TYPE[=STATUS], create or delete (default condition=Ready; "
                        "an object not recorded yet is waited for within the timeout)")
    p.add_argument("--timeout", type=_duration, default=30.0, help="e.g. 60s (default 30s)")

    p = sub.add_parser("controller", parents=[common], help="the reconciling daemon")
    dsub = p.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    dsub.required = True
    dsub = _Commands(dsub, verb)
    dp = dsub.add_parser("run", parents=[common],
                         help="keep a directory of manifests converged (also installed as celld)")
    _daemon_options(dp)

    p = sub.add_parser("op", parents=[common], help="act on suspended operations")
    osub = p.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    osub.required = True
    osub = _Commands(osub, verb)
    op = osub.add_parser("resume", parents=[common],
                         help="approve and continue a suspended operation")
    op.add_argument("operation", help="operation id (op_...)")
    op.add_argument("--input", action="append", metavar="KEY=VALUE",
                    help="resume input, validated against the operation's schema")
    op.add_argument("--input-file", action="append", metavar="FILE",
                    help="resume input as a YAML/JSON mapping")
    op.add_argument("--timeout", type=_duration, default=300.0)
    op = osub.add_parser("cancel", parents=[common], help="cancel a suspended operation")
    op.add_argument("operation", help="operation id (op_...)")
    op.add_argument("--timeout", type=_duration, default=300.0)

    p = sub.add_parser("schema", parents=[common],
                       help="print a kind's JSON Schema (cell, snapshot, or config)")
    p.add_argument("kind", type=_kind({**OBJECT_KINDS, "config": "Config"}), metavar="KIND")

    p = sub.add_parser("image", parents=[common], help="images for the container backend")
    isub = p.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    isub.required = True
    isub = _Commands(isub, verb)
    ip = isub.add_parser("build-base", parents=[common],
                         help="build devcell/busybox:latest offline from busybox-static")
    ip.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    ip = isub.add_parser("ls", parents=[common],
                         help="the images DevCell pulled for this state directory, with sizes")
    ip.add_argument("-o", "--output", choices=["table", "json"], default="table")
    ip = isub.add_parser("prune", parents=[common],
                         help="remove the images DevCell pulled that no cell or container uses")
    ip.add_argument("--dry-run", action="store_true", help="show what would be removed")

    p = sub.add_parser("import", parents=[common],
                       help="write a Cell manifest from another tool's description")
    isub = p.add_subparsers(dest="verb", metavar="FORMAT", parser_class=Parser)
    isub.required = True
    isub = _Commands(isub, verb)
    ip = isub.add_parser("devcontainer", parents=[common],
                         help="from a devcontainer.json (VS Code, Codespaces, DevPod, Coder)")
    ip.add_argument("path", nargs="?", metavar="PATH",
                    help="devcontainer.json, or a folder holding .devcontainer/devcontainer.json "
                         "or .devcontainer.json (default: the current folder)")
    ip.add_argument("-o", "--output", metavar="FILE",
                    help="write the manifest to FILE (default: standard output)")
    ip.add_argument("--name", help="the cell's name (default: devcontainer.json's name)")

    p = sub.add_parser("gc", parents=[common],
                       help="remove volumes and checkpoints nothing references")
    p.add_argument("--approve", action="store_true",
                   help="also remove orphans that hold files (no object ever named them)")
    p.add_argument("--dry-run", action="store_true", help="show what would be removed")

    p = sub.add_parser("df", parents=[common],
                       help="disk used by workspaces, checkpoints, fork layers, logs, runtimes "
                            "(-v: each one)")
    p.add_argument("-o", "--output", choices=["table", "yaml", "json"], default="table")

    p = sub.add_parser("exec", parents=[common], help="run a command in a running cell")
    p.add_argument("-i", "--stdin", action="store_true",
                   help="forward standard input to the command (its end closes the command's)")
    p.add_argument("-t", "--tty", action="store_true",
                   help="run the command on a pseudo-terminal (standard input must be a terminal)")
    p.add_argument("cell", help="cell name or id")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD...",
                   help="the command and its arguments, after --")

    p = sub.add_parser("logs", parents=[common], help="print the logs of a cell's services")
    p.add_argument("cell", help="cell name or id")
    p.add_argument("service", nargs="?", help="one service (default: all, each line prefixed)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing as logs grow")
    p.add_argument("--tail", type=_tail_lines, default=-1, metavar="N",
                   help="only the last N lines of each service's log (default -1: all)")
    p.add_argument("--since", metavar="DURATION|TIME", default=None,
                   help="only lines written in the last DURATION (5s, 2m, 1h) or since an "
                        "RFC 3339 TIME (2026-01-02T03:04:05Z)")
    p.add_argument("--since-time", dest="since", metavar="TIME",
                   help="kubectl's spelling of --since TIME")
    p.add_argument("--timestamps", action="store_true",
                   help="start each line with the time it was written (RFC 3339, UTC)")

    p = sub.add_parser("explain", parents=[common],
                       help="document a kind or one of its fields, from its JSON Schema")
    p.add_argument("target", metavar="KIND[.FIELD.PATH]", type=_explained,
                   help="e.g. cell, cell.spec.services, snapshot.spec.cell, config.security")
    p.add_argument("--recursive", action="store_true",
                   help="list every field below, nested, with its type")

    p = sub.add_parser("version", parents=[common],
                       help="client and schema versions, and the backends this machine can run")
    p.add_argument("-o", "--output", choices=["json", "yaml"], default=None)

    p = sub.add_parser("completion", parents=[common],
                       help="print a shell completion script (bash, zsh or fish)")
    p.add_argument("shell", choices=["bash", "zsh", "fish"], metavar="SHELL",
                   help="bash (source <(devcell completion bash)), zsh or fish")
    return parser


def _selector_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("-l", "--selector", metavar="SELECTOR",
                   help="label selector as kubectl's: team=core, tier!=db, 'team in (a,b)', "
                        "'env notin (prod)', owner, '!owner', joined by commas")


def _get_output(text: str) -> str:
    """`get -o`: checked by cli/printers when used; the words are for shell completion."""
    return text


_get_output.words = ["table", "wide", "yaml", "json", "name", "jsonpath=",  # type: ignore[attr-defined]
                     "jsonpath-file=", "custom-columns=", "custom-columns-file="]


def _explained(text: str) -> str:
    return text


_explained.words = sorted({*kinds.words(), "config"})  # type: ignore[attr-defined]


def _tail_lines(text: str) -> int:
    if not (text.isdigit() or text == "-1"):
        raise argparse.ArgumentTypeError(f"invalid line count {text!r} (a whole number, or -1: all)")
    return int(text)


def _daemon_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--manifests", required=True, help="directory of manifests to keep converged")
    p.add_argument("--workers", type=int, default=4, help="parallel reconciles (default 4)")
    p.add_argument("--resync", type=_duration, default=60.0,
                   help="period of the full resync that repairs drift (default 60s; 0: never)")
    p.add_argument("--no-runtime-events", dest="runtime_events", action="store_false",
                   help="do not follow the backend's runtime events (the engine's event "
                        "stream); only the resync then finds a runtime that died")
    p.add_argument("--log-json", action="store_true", help="machine-readable logs on stderr")


def _dispatch(args: argparse.Namespace) -> int:
    command = args.command
    if command in ("apply", "delete", "diff"):
        from devcell.cli import cmd_apply

        handler: Callable[[argparse.Namespace], int] = getattr(cmd_apply, f"run_{command}")
        return handler(args)
    if command in ("get", "describe"):
        from devcell.cli import cmd_get

        return cmd_get.run_get(args) if command == "get" else cmd_get.run_describe(args)
    if command == "op":
        from devcell.cli import cmd_op

        return cmd_op.run_op_resume(args) if args.verb == "resume" else cmd_op.run_op_cancel(args)
    if command == "snapshot" and args.verb == "restore":
        from devcell.cli import cmd_restore

        return cmd_restore.run_snapshot_restore(args)
    if command == "snapshot" and args.verb in ("export", "import"):
        from devcell.cli import cmd_transfer

        return int(getattr(cmd_transfer, f"run_snapshot_{args.verb}")(args))
    if command in ("snapshot", "cell"):
        from devcell.cli import cmd_cells

        return int(getattr(cmd_cells, f"run_{command}_{args.verb}")(args))
    if command in ("wait", "controller"):
        from devcell.cli import cmd_controller

        return cmd_controller.run_wait(args) if command == "wait" else cmd_controller.run_daemon(args)
    if command == "schema":
        from devcell import schemas

        sys.stdout.write(schemas.schema_text(args.kind))
        return 0
    if command == "image":
        from devcell.cli import cmd_image

        return cmd_image.run_image(args)
    if command == "import":
        from devcell.cli import cmd_import

        return cmd_import.run_import(args)
    if command == "gc":
        from devcell.cli import cmd_gc

        return cmd_gc.run_gc(args)
    if command == "df":
        from devcell.cli import cmd_df

        return cmd_df.run_df(args)
    if command == "explain":
        from devcell.cli import explain

        sys.stdout.write(explain.explain(args.target, recursive=args.recursive))
        return 0
    if command == "version":
        from devcell.cli import cmd_version

        return cmd_version.run_version(args)
    if command == "completion":
        from devcell.cli import completion

        sys.stdout.write(completion.script(args.shell))
        return 0
    if command in ("exec", "logs"):
        from devcell.cli import cmd_exec

        return cmd_exec.run_exec(args) if command == "exec" else cmd_exec.run_logs(args)
    raise AssertionError(command)


def celld(argv: Sequence[str] | None = None) -> int:
    """`celld`: the daemon on its own (same as `devcell controller run`)."""
    common = Parser(prog="celld", description="Keep a directory of DevCell manifests converged.")
    common.add_argument("--state-dir", default=None)
    common.add_argument("-v", "--verbose", action="count", default=0)
    common.add_argument("--run-store", choices=["sqlite", "file"], default=None)
    _daemon_options(common)
    args = common.parse_args(argv)
    args.command, args.verb = "controller", "run"
    return _run(args)


def command_word(given: Sequence[str]) -> str | None:
    """The first word that is neither an option nor a global option's value."""
    return next(iter(command_words(given)), None)


def command_words(given: Sequence[str], count: int = 1) -> list[str]:
    """The first `count` words that are neither options nor a global option's value."""
    found: list[str] = []
    words = iter(given)
    for word in words:
        if len(found) == count:
            break
        if word == "--":
            found.extend(list(words)[:count - len(found)])
            break
        if word in GLOBAL_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            found.append(word)
    return found


def parse(given: Sequence[str]) -> argparse.Namespace:
    """The parsed command line, global options filled in with their defaults."""
    first, second = [*command_words(given, 2), None, None][:2]
    only = first if first in COMMANDS else None  # anything else: the full parser explains
    verb = second if only is not None and second in VERBS.get(only, ()) else None
    args = build_parser(only, verb).parse_args(list(given))
    if isinstance(getattr(args, "selector", None), str):
        # kubectl trims -l: a blank one is no selector at all, never "every object"
        args.selector = args.selector.strip()
    for name, default in GLOBAL_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["__complete"]:  # a TAB press in a shell (devcell completion)
        from devcell.cli import completion

        return completion.run_hidden(given[1:])
    return _run(parse(given))


def _run(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except ManifestError as exc:
        for problem in exc.problems:
            sys.stderr.write(f"error: {problem}\n")
        count = len(exc.problems)
        sys.stderr.write(f"{count} problem{'s' if count != 1 else ''} found; nothing was changed\n")
        return exc.exit_code
    except DevCellError as exc:
        sys.stderr.write(f"error: {printable_lines(str(exc))}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:  # a full or read-only disk met outside the database: not a bug
        from devcell.store import db, faults

        machine = faults.from_os_error(exc, db.resolve_state_dir(getattr(args, "state_dir", None)))
        if machine is None:
            raise
        sys.stderr.write(f"error: {machine}\n")
        return machine.exit_code
