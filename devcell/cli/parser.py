"""The command line's parser, built from the command table (cli/commands.py).

argparse is slow to build, so `parse` builds only the command (and verb) a command line
names; the full parser (`build_parser()`) is for help, completion and docs/cli.md's test.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from devcell import __version__
from devcell.cli import commands
from devcell.cli.commands import COMMANDS, GROUPS, TABLE, VERBS

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMANDS", "VERBS", "Parser", "build_parser", "command_word", "command_words",
           "parse"]


class Formatter(argparse.HelpFormatter):
    """argparse's help layout at the terminal's width, found as `shutil.get_terminal_size`
    finds it (COLUMNS, then stdout's terminal, else 80). argparse builds a formatter for
    every argument it adds and would import shutil (with bz2, lzma and zlib) to measure the
    terminal in every command; only help output uses the width."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _columns() - 2 if width is None else width)


def _columns() -> int:
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(2)


GLOBAL_DEFAULTS: dict[str, Any] = {"state_dir": None, "verbose": 0, "run_store": None,
                                   "server": None, "context": None, "token_file": None,
                                   "certificate_authority": None}
"""The options every command takes, before or after the command's words, and their defaults."""
GLOBAL_WITH_VALUE = ("--state-dir", "--run-store", "--server", "--context", "--token-file",
                     "--certificate-authority")


def global_options(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument("--server", metavar="URL", default=argparse.SUPPRESS,
                        help="talk to DevCell's HTTP API there: unix:PATH or "
                             "https://HOST:PORT (docs/cli.md, remote use)")
    parser.add_argument("--context", metavar="NAME", default=argparse.SUPPRESS,
                        help="use this context of the contexts file (devcell context list)")
    parser.add_argument("--token-file", metavar="FILE", default=argparse.SUPPRESS,
                        help="the file holding the server's token (or $DEVCELL_TOKEN; never "
                             "a token on the command line)")
    parser.add_argument("--certificate-authority", metavar="FILE", default=argparse.SUPPRESS,
                        help="the certificate (PEM) the server's TLS certificate is checked "
                             "against (DevCell's own: the server's api-tls/cert.pem)")


def build_parser(only: str | None = None, verb: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; with `only`, just that command's, and with `verb`, just that verb's
    of it (faster: the same behaviour for the words given)."""
    common = Parser(add_help=False)
    global_options(common)

    parser = Parser(prog="devcell", description="Isolated development environments, declared in YAML.")
    parser.add_argument("--version", action="version", version=f"devcell {__version__}")
    global_options(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    subparsers.required = True
    groups: dict[str, Any] = {}
    for entry in TABLE:
        command = entry.words[0]
        if only is not None and command != only:
            continue
        if len(entry.words) == 1:
            p = subparsers.add_parser(command, parents=[common], help=entry.help)
            entry.arguments(p)
            continue
        if command not in groups:
            group = GROUPS[command]
            holder = subparsers.add_parser(command, parents=[common], help=group.help)
            groups[command] = holder.add_subparsers(dest="verb", metavar=group.metavar,
                                                    parser_class=Parser)
            groups[command].required = True
        if verb is not None and entry.words[1] != verb:
            continue
        p = groups[command].add_parser(entry.words[1], parents=[common], help=entry.help)
        entry.arguments(p)
    return parser


def celld_parser() -> Parser:
    """`celld`'s: the daemon's options with the global ones (defaults of their own)."""
    parser = Parser(prog="celld", description="Keep a directory of DevCell manifests converged.")
    parser.add_argument("--state-dir", default=None)
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("--run-store", choices=["sqlite", "file"], default=None)
    parser.set_defaults(server=None, context=None, token_file=None, certificate_authority=None)
    commands.daemon_arguments(parser)
    return parser


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
