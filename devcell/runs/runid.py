"""Run ids are used as directory names and keys: check them before they touch a path.

A run id is 1 to 128 characters from letters, digits, `.`, `_` and `-`, starting with a letter
or a digit. That rules out `..`, `/`, NUL, hidden names and anything a shell or a file system
would treat specially, so a run id can never name a path outside its store. Operation ids
(`op_…`) qualify.
"""

from __future__ import annotations

import re

from devcell.errors import StorageError

MAX_LENGTH = 128
PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}(?!\n)$"
_RUN_ID = re.compile(PATTERN)


def problem(run_id: object) -> str | None:
    """Why `run_id` is not acceptable, or None when it is."""
    if not isinstance(run_id, str):
        return f"run id must be a string, not {type(run_id).__name__}"
    if not run_id:
        return "run id is empty"
    if len(run_id) > MAX_LENGTH:
        return f"run id is {len(run_id)} characters long (at most {MAX_LENGTH})"
    if "\x00" in run_id:
        return f"run id {run_id!r} contains a NUL character"
    if "/" in run_id or "\\" in run_id:
        return f"run id {run_id!r} contains a path separator"
    if run_id in (".", ".."):
        return f"run id {run_id!r} names a directory, not a run"
    if not _RUN_ID.fullmatch(run_id):
        return (f"run id {run_id!r} must start with a letter or a digit and use only letters, "
                "digits, '.', '_' and '-'")
    return None


def check(run_id: object, *, store: str) -> str:
    """Return `run_id` if acceptable, else raise StorageError(INVALID_RUN_ID) at `store`."""
    reason = problem(run_id)
    if reason is not None:
        raise StorageError(code=StorageError.INVALID_RUN_ID, path=store, reason=reason)
    assert isinstance(run_id, str)
    return run_id
