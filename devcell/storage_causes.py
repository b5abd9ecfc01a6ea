"""What a failed SQLite call or file operation says about the machine: one table each.

The state database (store/faults.py) and the run snapshot stores (runs/) meet the same full
disks, read-only directories and damaged files; both name the cause with StorageError's codes,
from these tables, so the two cannot drift apart.
"""

from __future__ import annotations

import errno

from devcell.errors import StorageError

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:  # sqlite3 is imported only by the paths that open a database
    import sqlite3

MACHINE_CAUSES = {
    3: StorageError.PERMISSION_DENIED,  # SQLITE_PERM
    8: StorageError.READ_ONLY,  # SQLITE_READONLY
    10: StorageError.IO_ERROR,  # SQLITE_IOERR
    11: StorageError.CORRUPT_DATABASE,  # SQLITE_CORRUPT
    13: StorageError.DISK_FULL,  # SQLITE_FULL
    14: StorageError.IO_ERROR,  # SQLITE_CANTOPEN
    23: StorageError.PERMISSION_DENIED,  # SQLITE_AUTH
    26: StorageError.CORRUPT_DATABASE,  # SQLITE_NOTADB
}
"""Primary result codes that speak of the machine, not of DevCell's SQL."""

BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
"""Another connection holds the database: waiting can help."""


def primary_code(exc: sqlite3.Error) -> int:
    """The primary result code (the low byte of the extended one); 0 when SQLite gave none."""
    return (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF


def machine_cause(exc: sqlite3.Error) -> str | None:
    """StorageError's code for a failure of the machine under the database; None otherwise."""
    return MACHINE_CAUSES.get(primary_code(exc))


OS_CAUSES = {
    errno.EACCES: StorageError.PERMISSION_DENIED,
    errno.EPERM: StorageError.PERMISSION_DENIED,
    errno.ENOSPC: StorageError.DISK_FULL,
    errno.EDQUOT: StorageError.DISK_FULL,
    errno.EFBIG: StorageError.DISK_FULL,
    errno.EROFS: StorageError.READ_ONLY,
    errno.ELOOP: StorageError.UNSAFE_PATH,
}
"""errno values whose cause StorageError names; any other is an IO_ERROR."""


def os_cause(exc: OSError) -> str | None:
    return OS_CAUSES.get(exc.errno or 0)
