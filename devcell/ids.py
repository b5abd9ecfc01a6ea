"""Stable object ids (`cell_…`, `snap_…`, `vol_…`, `op_…`): time-ordered, unique, opaque."""

from __future__ import annotations

import os
import time
from typing import NewType

from devcell import kinds

CellId = NewType("CellId", str)
SnapshotId = NewType("SnapshotId", str)
VolumeId = NewType("VolumeId", str)
OperationId = NewType("OperationId", str)

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _b32(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


_last = (0, 0)


def new_id(prefix: str) -> str:
    """`prefix_` + 10 chars of milliseconds + 8 random chars: sorts by creation time.

    Monotonic within a process (as ULIDs are): ids made in the same millisecond increment
    the random part instead of drawing a new one, so they still sort in creation order.
    """
    global _last
    millis = time.time_ns() // 1_000_000
    last_millis, last_rand = _last
    if millis <= last_millis and last_rand < (1 << 40) - 1:
        millis, rand = last_millis, last_rand + 1
    else:
        rand = int.from_bytes(os.urandom(5), "big") >> 1  # headroom for increments
    _last = (millis, rand)
    return f"{prefix}_{_b32(millis, 10)}{_b32(rand, 8)}"


ID_PREFIXES = kinds.id_prefixes()


def looks_like_id(value: str) -> bool:
    return value.startswith(ID_PREFIXES) and "_" in value
