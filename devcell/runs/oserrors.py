"""Operating system errors, translated once into StorageError codes."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devcell import storage_causes
from devcell.errors import StorageError


def to_storage_error(exc: OSError, *, path: str | Path, doing: str) -> StorageError:
    code = storage_causes.os_cause(exc) or StorageError.IO_ERROR
    if exc.errno == errno.ENOTDIR and os.path.islink(path):
        code = StorageError.UNSAFE_PATH  # O_DIRECTORY|O_NOFOLLOW on a link says ENOTDIR
    detail = exc.strerror or str(exc) or type(exc).__name__
    if code == StorageError.UNSAFE_PATH:
        detail = "is a symbolic link (refusing to follow it)"
    return StorageError(code=code, path=str(path), reason=f"{doing}: {detail}")


@contextmanager
def translated(path: str | Path, doing: str) -> Iterator[None]:
    """Turn any OSError raised inside into a StorageError about `path`."""
    try:
        yield
    except OSError as exc:
        raise to_storage_error(exc, path=path, doing=doing) from exc
