"""`devcell ssh CELL [-- CMD...]`, `devcell ssh-config [CELL...]` and `devcell ssh-proxy CELL`
(the ProxyCommand both of them name): OpenSSH's client reaching a cell (api/ssh/)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from devcell import backends, names
from devcell.cli.cell_open import open_cell
from devcell.errors import UsageError
from devcell.store import db as dbmod
from devcell.store import objects


def program() -> list[str]:
    """How the ProxyCommand runs this DevCell: its own executable when it was run as one,
    else this Python with `-m devcell` (a checkout, a test)."""
    launched = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if launched is not None and launched.name in ("devcell", "celld"):
        found = launched if launched.is_absolute() else shutil.which(str(launched))
        if found is not None and os.access(found, os.X_OK):
            return [str(Path(found).absolute().with_name("devcell"))]
    return [sys.executable, "-m", "devcell"]


def _reachable(state_dir: Path, wanted: list[str]) -> list[str]:
    """The names of the cells asked for (all cells whose backend runs commands, when none
    is named); NotFound for a name not recorded, CapabilityMissing for a fake cell."""
    from devcell.backends.interactive import interactive

    db = dbmod.open_database(state_dir)
    try:
        if wanted:
            cells = [objects.require(db.conn, "Cell", name) for name in wanted]
        else:
            cells = objects.list_live(db.conn, "Cell")
    finally:
        db.close()
    out = []
    for cell in cells:
        backend_name = cell.extra["backend"]
        if not backends.capabilities(backend_name).exec:
            if wanted:
                interactive(backends.load(backend_name, state_dir), backend_name)
            continue
        out.append(cell.name)
    return out


def run_ssh_config(args: argparse.Namespace) -> int:
    from devcell.api.ssh import client_config, keys

    state_dir = dbmod.resolve_state_dir(args.state_dir)
    cells = _reachable(state_dir, list(args.cells))
    keys.host_key(state_dir)  # the pin the blocks name exists before anyone connects
    blocks = [client_config.config_block(program(), state_dir, name) for name in cells]
    return write_config(str(state_dir), blocks, "here")


def write_config(where: str, blocks: list[str], place: str) -> int:
    """Print the Host blocks of the cells of `where` (a state directory `here`, a server
    `there`)."""
    sys.stdout.write(f"# DevCell cells of {names.printable(where)}: add to ~/.ssh/config "
                     "(devcell ssh-config >> ~/.ssh/config)\n")
    sys.stdout.write("\n".join(blocks))
    if not blocks:
        sys.stderr.write(f"no cell {place} runs commands (container or vm backend); nothing "
                         "to reach over SSH yet\n")
    return 0


def ssh_command(args: argparse.Namespace) -> tuple[str, list[str]]:
    """(OpenSSH's client, the command after `--`) of `devcell ssh`; UsageError without ssh."""
    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    ssh = shutil.which("ssh")
    if ssh is None:
        raise UsageError("devcell ssh runs OpenSSH's client, which is not installed: "
                         "apt-get install openssh-client (or use devcell exec -it CELL -- sh)")
    return ssh, command


def run_ssh(args: argparse.Namespace) -> int:
    from devcell.api.ssh import client_config, keys

    ssh, command = ssh_command(args)
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    _reachable(state_dir, [args.cell])
    _wake_if_asleep(args, state_dir)
    keys.host_key(state_dir)
    argv = client_config.ssh_argv(program(), state_dir, args.cell, tty=args.tty,
                                  command=command)
    from devcell.backends.host import children

    children.replace_process(ssh, argv)


def _wake_if_asleep(args: argparse.Namespace, state_dir: Path) -> None:
    """`devcell ssh` wakes a sleeping cell before OpenSSH starts, so what it says is seen
    before the session (ssh-proxy would wake it too, its words on OpenSSH's stderr)."""
    from devcell.cli.cell_open import wake_for

    db = dbmod.open_database(state_dir)
    try:
        phase = objects.require(db.conn, "Cell", args.cell).phase
    finally:
        db.close()
    if phase == objects.Phase.SLEEPING:
        wake_for(args, "ssh")


def run_ssh_proxy(args: argparse.Namespace) -> int:
    from devcell.api.ssh import server

    if sys.stdin is None or sys.stdout is None:
        raise UsageError("ssh-proxy speaks SSH on its standard input and output; OpenSSH "
                         "runs it as a ProxyCommand (see devcell ssh-config)")
    from devcell.store import activity

    attached = open_cell(args, verb="connecting anyway", by="ssh")
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    session = activity.open_session(state_dir, attached.ref.id, "ssh")
    try:
        return server.serve(attached, state_dir, sys.stdin.fileno(), sys.stdout.fileno())
    finally:
        if session is not None:
            session.close()
        attached.close()
