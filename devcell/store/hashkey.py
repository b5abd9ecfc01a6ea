"""The state directory's hash key: what makes a hash over a secret unguessable.

A hash that covers a secret (the runtime hash on a container's label, which anyone allowed to
`docker inspect` can read; the spec hashes in the store) is keyed with HMAC under this key, so
a short secret cannot be recovered by hashing guesses. The key is 32 random bytes in
`<state>/hash.key`, owner-only (0600), made once: concurrent first commands race to link a
complete file into place, and every loser reads the winner's. Losing the key costs at most
one recreate of each cell that has secrets (their runtime hash changes), never a secret; and
every API token (devcell.auth.tokens keeps only their HMACs under a key derived from it):
they fail until new ones are made.
"""

from __future__ import annotations

import os  # os.urandom: the CSPRNG `secrets` draws from, without importing random and base64
from pathlib import Path

from devcell.errors import StateError

FILENAME = "hash.key"
SIZE = 32


def load(state_dir: Path) -> bytes:
    """The key of `state_dir`, created on first use."""
    path = state_dir / FILENAME
    for _ in range(3):
        key = _read(path)
        if key is not None:
            return key
        _create(path)
    raise StateError(f"{path}: cannot read or create the hash key")


def existing(state_dir: Path) -> bytes | None:
    """The key of `state_dir` if it has a usable one, never made here: for what may go without
    (the compiled validators' cache of a command that need not make a state directory)."""
    from devcell import safeio

    try:
        fd = safeio.open_regular(state_dir, FILENAME)
    except (OSError, safeio.UnsafeFile):
        return None
    try:
        data = safeio.read_some(fd, SIZE + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) == SIZE else None


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"{path}: cannot read the hash key ({exc.strerror})") from None
    try:
        data = os.read(fd, SIZE + 1)
    finally:
        os.close(fd)
    if len(data) != SIZE:
        raise StateError(f"{path}: not a DevCell hash key ({len(data)} bytes, expected {SIZE}); "
                         "remove it and DevCell makes a new one (cells with secrets are "
                         "recreated once)")
    return data


def _create(path: Path) -> None:
    tmp = path.with_name(f".{FILENAME}.{os.urandom(6).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, os.urandom(SIZE))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another process linked its key first: theirs wins
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
