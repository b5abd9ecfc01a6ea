"""What OpenSSH needs to reach a cell: its options, as an ssh_config block or as `-o` flags.

`Host CELL.devcell` runs `devcell --state-dir STATE ssh-proxy CELL` as its ProxyCommand and
trusts exactly the state directory's host key (keys.py), so `ssh`, `scp`, `sftp`, `rsync -e
ssh`, VS Code Remote-SSH and JetBrains Gateway connect with no prompt and no open port.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from devcell import names
from devcell.api.ssh import keys
from devcell.errors import UsageError

DOMAIN = "devcell"


def host_alias(cell_name: str) -> str:
    return f"{cell_name}.{DOMAIN}"


def options(program: Sequence[str], state_dir: Path, cell_name: str) -> list[tuple[str, str]]:
    """(keyword, value) pairs for one cell of a state directory, in ssh_config's spelling."""
    return reach_options(program, ["--state-dir", str(state_dir)],
                         keys.known_hosts_path(state_dir), cell_name)


def reach_options(program: Sequence[str], where: Sequence[str], known_hosts: Path,
                  cell_name: str) -> list[tuple[str, str]]:
    """(keyword, value) pairs for one cell: the ProxyCommand is `PROGRAM WHERE... ssh-proxy
    CELL` (WHERE: --state-dir DIR, or the options that reach a server), the key pinned the
    one in `known_hosts`."""
    problem = names.name_problem(cell_name)
    if problem is not None:  # a hostile server's list: a newline would add ssh_config lines
        raise UsageError(f"cannot write an ssh configuration for cell {problem}")
    for text in (*program, *where, str(known_hosts)):
        if any(ch in text for ch in "\n\r\0"):
            raise UsageError(f"cannot write an ssh configuration for {text!r}: it holds a "
                             "line break")
    command = " ".join(shlex.quote(part) for part in
                       (*program, *where, "ssh-proxy", cell_name))
    known = str(known_hosts)
    return [
        ("HostName", host_alias(cell_name)),
        ("ProxyCommand", command.replace("%", "%%")),  # ssh_config expands % tokens
        ("UserKnownHostsFile", _quoted(known)),
        ("GlobalKnownHostsFile", "/dev/null"),
        ("StrictHostKeyChecking", "yes"),
        ("HostKeyAlgorithms", "ssh-ed25519"),
        ("LogLevel", "ERROR"),
    ]


def config_block(program: Sequence[str], state_dir: Path, cell_name: str) -> str:
    return block(cell_name, options(program, state_dir, cell_name))


def block(cell_name: str, pairs: Sequence[tuple[str, str]]) -> str:
    """The `Host CELL.devcell` block of these options."""
    lines = [f"Host {host_alias(cell_name)}"]
    lines += [f"    {keyword} {value}" for keyword, value in pairs]
    return "\n".join(lines) + "\n"


def ssh_argv(program: Sequence[str], state_dir: Path, cell_name: str, *, tty: bool,
             command: Sequence[str]) -> list[str]:
    """OpenSSH's command line for `devcell ssh`: the user's own configuration is left out
    (-F /dev/null), so nothing in it can send the connection elsewhere."""
    return argv_of(options(program, state_dir, cell_name), cell_name, tty=tty,
                   command=command)


def argv_of(pairs: Sequence[tuple[str, str]], cell_name: str, *, tty: bool,
            command: Sequence[str]) -> list[str]:
    """OpenSSH's command line with these options (ssh_argv's)."""
    argv = ["ssh", "-F", "/dev/null"]
    for keyword, value in pairs:
        argv += ["-o", f"{keyword}={value}"]
    if tty:
        argv.append("-t")
    argv.append(host_alias(cell_name))
    if len(command) == 1:
        argv += ["--", command[0]]  # one word: a shell command line, as ssh takes it
    elif command:
        argv += ["--", " ".join(shlex.quote(word) for word in command)]  # each word kept
    return argv


def _quoted(path: str) -> str:
    return f'"{path}"' if any(ch.isspace() for ch in path) else path
