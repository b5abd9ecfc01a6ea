"""The SSH host key of a state directory and the known_hosts file that pins it.

One ed25519 key per state directory, made on first use, owner-only (`<state>/ssh/`): the
ProxyCommand presents it and the configuration `ssh-config` writes tells OpenSSH to accept
exactly it for `*.devcell`, so there is no first-use prompt and no key to trust blindly.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from devcell.errors import StateError
from devcell.store.db import ensure_private_dir

if TYPE_CHECKING:
    import asyncssh

HOST_PATTERN = "*.devcell"
KEY_FILE = "host_ed25519_key"
KNOWN_HOSTS = "known_hosts"
MAX_KEY_BYTES = 16 * 1024


def ssh_dir(state_dir: Path) -> Path:
    return state_dir / "ssh"


def host_key(state_dir: Path) -> asyncssh.SSHKey:
    """The state directory's host key, made (and its known_hosts written) on first use."""
    import asyncssh

    directory = ssh_dir(state_dir)
    ensure_private_dir(directory)
    path = directory / KEY_FILE
    try:
        data = _read_private(path)
    except FileNotFoundError:
        key = asyncssh.generate_private_key("ssh-ed25519", comment="devcell host key")
        data = key.export_private_key()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
        except FileExistsError:  # another ProxyCommand made it first: use that one
            data = _read_private(path)
        else:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
    try:
        key = asyncssh.import_private_key(data)
    except (asyncssh.KeyImportError, ValueError):
        raise StateError(f"the SSH host key {path} is damaged; remove it (a new one is made "
                         "and `devcell ssh-config` prints the new pin)") from None
    _write_known_hosts(directory, key)
    return key


def known_hosts_path(state_dir: Path) -> Path:
    return ssh_dir(state_dir) / KNOWN_HOSTS


def _read_private(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise StateError(f"the SSH host key {path} is a symbolic link; remove it and a new "
                         "one is made") from None
    try:
        info = os.fstat(fd)
        if not (info.st_mode & 0o170000 == 0o100000) or info.st_mode & 0o077 \
                or info.st_uid != os.geteuid():
            raise StateError(f"the SSH host key {path} is not a private file of this user "
                             "(a regular file, mode 0600); remove it and a new one is made")
        return os.read(fd, MAX_KEY_BYTES)
    finally:
        os.close(fd)


def public_key(key: asyncssh.SSHKey) -> str:
    """The host key's public half, as known_hosts and the API's /ssh/host-key give it:
    `ssh-ed25519 BASE64` (no comment)."""
    algorithm, data = key.export_public_key().decode().split()[:2]
    return f"{algorithm} {data}"


PUBLIC_KEY = re.compile(r"ssh-ed25519 [A-Za-z0-9+/]{68}")
"""An ed25519 public key as public_key() writes it (what a server's answer must be)."""


def write_known_hosts(path: Path, public: str) -> None:
    """`path` made to pin `public` (checked: an ed25519 key, nothing else) for *.devcell,
    owner-only, replaced whole; left alone when it already says the same."""
    if not PUBLIC_KEY.fullmatch(public):
        raise StateError("the server's SSH host key is not an ed25519 public key "
                         "(ssh-ed25519 BASE64): nothing was written")
    line = f"{HOST_PATTERN} {public}\n"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:  # a FIFO planted there reads as nothing (never waited on), then is replaced
            if os.read(fd, 4096).decode(errors="replace") == line:
                return
        finally:
            os.close(fd)
    except OSError:
        pass
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)  # a leftover, or a link or FIFO planted at the name: never opened
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(line)
        os.replace(temporary, path)
    except BaseException as exc:  # none left behind (one a run was left by a directory there)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, IsADirectoryError):  # it named the temporary file, which is fine
            raise StateError(f"{path} is a directory, not the known_hosts file DevCell writes "
                             "there: move it away and run the command again") from None
        raise


def _write_known_hosts(directory: Path, key: asyncssh.SSHKey) -> None:
    write_known_hosts(directory / KNOWN_HOSTS, public_key(key))
