"""`devcell code CELL [--print]`: VS Code on the running cell over Remote-SSH, with the
extensions and settings its manifest's annotations ask for (api/code.py), after the cell's
postAttach hooks."""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from devcell import names
from devcell.cli.cell_open import open_cell
from devcell.store import db as dbmod
from devcell.store import objects

SSH_CONFIG_LIMIT = 1 << 20


def run_code(args: argparse.Namespace) -> int:
    from devcell.api import code

    state_dir = dbmod.resolve_state_dir(args.state_dir)
    db = dbmod.open_database(state_dir)
    try:
        annotations = dict(objects.require(db.conn, "Cell", args.cell).annotations)
    finally:
        db.close()
    attached = open_cell(args, verb="applying the editor's settings anyway", by="code")
    try:
        editor = code.wanted(annotations)
        if editor.settings is None and not editor.extensions and not editor.problems:
            sys.stderr.write(f"cell {names.printable(attached.ref.name)}: no VS Code extensions "
                             "or settings in its annotations\n")
        code.apply(attached.interactive(), attached.ref, editor, say=say)
        # VS Code attaching: its sessions are commands and its terminals the server's own,
        # so the cell's postAttach hooks run here (api/post_attach.py)
        from devcell.api import post_attach

        post_attach.run(attached.interactive(), attached.ref, out=sys.stderr.buffer)
        argv = code.open_argv(attached.ref)
    finally:
        attached.close()
    return open_editor(attached.ref.name, argv, print_only=args.print)


def open_editor(cell: str, argv: list[str], *, print_only: bool,
                ssh_config: str = "devcell ssh-config") -> int:
    """VS Code opened on the cell (`argv`, api.code.open_argv), or its command line printed
    (`print_only`, or no `code` on PATH); a note when ~/.ssh/config has no Host block for the
    cell, saying the `ssh_config` command that adds it."""
    from devcell.api import code

    host = f"{cell}.devcell"
    if not _in_ssh_config(host):
        sys.stderr.write(f"note: VS Code's Remote-SSH reads ~/.ssh/config, which has no Host "
                         f"{names.printable(host)} block: add it with `{ssh_config} "
                         f"{names.printable(cell)} >> ~/.ssh/config`\n")
    found = shutil.which("code")
    if print_only or found is None:
        if found is None and not print_only:
            sys.stderr.write("VS Code's `code` command is not on PATH; open the cell with:\n")
        print(code.shown(argv))
        return 0
    from devcell.backends.host import children

    return children.run_attached([found, *argv[1:]])


def say(line: str) -> None:
    sys.stderr.write(line + "\n")


def _in_ssh_config(host: str) -> bool:
    """Whether the user's ~/.ssh/config names `host` (read bounded; unreadable: no)."""
    path = os.path.expanduser("~/.ssh/config")
    try:
        with open(path, "rb") as f:
            text = f.read(SSH_CONFIG_LIMIT).decode(errors="replace")
    except OSError:
        return False
    return any(line.split()[:1] == ["Host"] and host in line.split()[1:]
               for line in text.splitlines() if line.strip())
