"""The ids a backend puts in paths and process names, and the label of a state directory.

Every path a backend builds under the state directory is built from an id that first passed a
strict regular expression (letters, digits, `_` and `-` only), so no name can make a path
escape it. `state_hash` is the short label that says which state directory owns a container,
a QEMU machine or an image (its label or `-name`): two state directories never share one.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from devcell.errors import BackendRefused

_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,127}")


def is_safe_id(value: str) -> bool:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def safe_id(what: str, value: str) -> str:
    """`value` if it is a safe id (cannot escape a directory), else BackendRefused."""
    if not is_safe_id(value):
        raise BackendRefused(f"refusing {what} id {value!r}: ids are lower-case letters, "
                             "digits, '_' and '-' (at most 128 characters)")
    return value


def state_hash(state_dir: Path) -> str:
    """A short, stable digest of the resolved state directory (the ownership label)."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:16]
