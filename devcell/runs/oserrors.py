"""Operating system errors, translated once into StorageError codes."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devcell.errors import StorageError

_CODES = {
    errno.EACCES: StorageError.PERMISSION_DENIED,
    errno.EPERM: StorageError.PERMISSION_DENIED,
    errno.ENOSPC: StorageError.DISK_FULL,
    errno.EDQUOT: StorageError.DISK_FULL,
    errno.EFBIG: StorageError.DISK_FULL,
    errno.EROFS: StorageError.READ_ONLY,
    errno.ELOOP: StorageError.UNSAFE_PATH,
}


def to_storage_error(exc: OSError, *, path: str | Path, doing: str) -> StorageError:
    code = _CODES.get(exc.errno or 0, StorageError.IO_ERROR)
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
