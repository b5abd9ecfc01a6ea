"""`ssh-config` and `ssh` through a server (cli/remote.py): a developer's own ssh, scp, rsync
and IDE (VS Code Remote-SSH, JetBrains Gateway) into cells on a team's server.

The same Host blocks and OpenSSH command line as on the server's machine, but the
ProxyCommand reaches the cell through the server (`devcell --context NAME ssh-proxy CELL`, or
`--server URL` with the certificate and token file this command was given: never a token on a
command line), and the host key pinned is the server's (GET /api/v1/ssh/host-key, checked to
be an ed25519 key), kept in a known_hosts file of this user's for that server, beside the
contexts file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path
from typing import Any


def run_ssh_config(args: argparse.Namespace) -> int:
    from devcell.api.ssh import client_config
    from devcell.cli.cmd_ssh import program, write_config

    cells = _reachable(args.remote, list(args.cells))
    where, known = reach(args, warn=True), _known_hosts(args)
    blocks = [client_config.block(name, client_config.reach_options(program(), where, known,
                                                                    name))
              for name in cells]
    return write_config(args.remote_target.url, blocks, "there")


def run_ssh(args: argparse.Namespace) -> int:
    from devcell.api.ssh import client_config
    from devcell.backends.host import children
    from devcell.cli.cmd_ssh import program, ssh_command

    ssh, command = ssh_command(args)
    _reachable(args.remote, [args.cell])
    pairs = client_config.reach_options(program(), reach(args, warn=True),
                                          _known_hosts(args), args.cell)
    children.replace_process(ssh, client_config.argv_of(pairs, args.cell, tty=args.tty,
                                                        command=command))
    return 0  # not reached: the process is OpenSSH now


def _reachable(client: Any, wanted: list[str]) -> list[str]:
    """The cells asked for (every cell whose backend runs commands, when none is named), as
    the server records them; NotFound for a name it does not have, CapabilityMissing for a
    cell on a backend without commands (a fake cell), as on the server's machine."""
    from devcell import backends
    from devcell.backends.interactive import no_exec

    if wanted:
        found = [(name, str(client.get("cells", name)["spec"].get("backend", "")))
                 for name in wanted]
    else:
        found = [(str(item["row"]["name"]), str(item["row"].get("backend", "")))
                 for item in client.rows("cells").get("items", [])
                 if item["row"].get("deleted_at") is None]
    out = []
    for name, backend in found:
        if not backends.capabilities(backend).exec:  # none for a backend unknown here
            if wanted:
                raise no_exec(backend)
            continue
        out.append(name)
    return out


def reach(args: argparse.Namespace, *, warn: bool) -> list[str]:
    """The global options that reach the server again (the ProxyCommand's, the command
    `code` says to run): the context this command used, else --server with the certificate
    and token file it was given (none for the unix socket, which uses no token); `warn`: a
    token from $DEVCELL_TOKEN is warned about."""
    target = args.remote_target
    if target.context is not None:
        return ["--context", target.context]
    words = ["--server", target.url]
    if target.ca is not None:
        words += ["--certificate-authority", os.path.abspath(target.ca)]
    if args.token_file is not None and not target.url.startswith("unix:"):
        words += ["--token-file", os.path.abspath(args.token_file)]
    elif target.token is not None and warn:
        sys.stderr.write("warning: the token came from $DEVCELL_TOKEN: OpenSSH runs the "
                         "ProxyCommand with the environment it was started in, and an IDE may "
                         "not have it; give --token-file FILE, or use a context (devcell "
                         "context set NAME --server URL --token-file FILE)\n")
    return words


def _known_hosts(args: argparse.Namespace) -> Path:
    """This user's known_hosts file for the server, pinning the key it answers with."""
    from devcell.api.ssh import keys
    from devcell.cli import contexts
    from devcell.store.db import ensure_private_dir

    public = args.remote.ssh_host_key()
    directory = contexts.path().parent / "ssh"
    ensure_private_dir(directory)
    url = args.remote_target.url
    path = directory / f"known_hosts-{hashlib.sha256(url.encode()).hexdigest()[:16]}"
    keys.write_known_hosts(path, public)
    return path
