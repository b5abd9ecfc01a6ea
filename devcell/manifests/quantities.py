"""Quantities a manifest writes as text (memory: `512Mi`), turned into numbers once, here.

Validation and the backends read a quantity the same way, so a value validation accepts is
one the backend can pass on: never zero, never beyond what the engine's 64-bit fields hold
(`99999999999999Ti` is 1.1e26 bytes; Docker would fail late or wrap it).
"""

from __future__ import annotations

import re

MEMORY_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
MAX_MEMORY_BYTES = 2**63 - 1
"""The largest limit an engine's signed 64-bit byte count holds (8 EiB)."""
_MEMORY = re.compile(r"([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?")
MEMORY_PATTERN = "^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?(?!\\n)$"
"""What the cell schema accepts for spec.resources.memory (the pattern of _MEMORY)."""
MEMORY_WORDS = ("write 512Mi or 2Gi: a whole number of bytes, or with one of the suffixes Ki, "
                "Mi, Gi, Ti (powers of 1024) or k, M, G, T (powers of 1000), as Kubernetes "
                "writes quantities")


def memory_bytes(text: str) -> int:
    """The memory limit `text` in bytes; ValueError with the reason when it cannot be one."""
    match = _MEMORY.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid memory limit {text!r}: {MEMORY_WORDS}")
    digits, unit = match.group(1), match.group(2) or ""
    if len(digits) > 30:  # int() of a huge digit string is slow; it is out of range anyway
        raise ValueError(f"memory limit {text[:20]}... is larger than the maximum of 8Ei")
    value = int(digits) * MEMORY_UNITS[unit]
    if value == 0:
        raise ValueError("memory limit must be greater than 0")
    if value > MAX_MEMORY_BYTES:
        raise ValueError(f"memory limit {text} is larger than the maximum of 8Ei "
                         f"({MAX_MEMORY_BYTES} bytes)")
    return value


def memory_problem(text: str) -> str | None:
    """Why `text` is not a usable memory limit, or None."""
    try:
        memory_bytes(text)
    except ValueError as exc:
        return str(exc)
    return None


def show_bytes(value: int) -> str:
    """6291456 -> 6Mi: a limit as a manifest would write it."""
    for unit in ("Ti", "Gi", "Mi", "Ki"):
        size = MEMORY_UNITS[unit]
        if value >= size and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_PATTERN = "^[1-9][0-9]{0,5}[smhd](?!\\n)$"
"""What the schemas accept for a duration (`ttl: 7d`, `every: 1h`): a whole number of seconds,
minutes, hours or days, never zero (at most 999999 of the unit)."""
DURATION_OR_NEVER_PATTERN = "^(?:[1-9][0-9]{0,5}[smhd]|never)(?!\\n)$"
"""`idle.sleepAfter`: a duration, or `never`."""
_DURATION = re.compile(r"([1-9][0-9]{0,5})([smhd])")


def duration_seconds(text: str) -> int:
    """The duration `text` (30m, 12h, 7d) in seconds; ValueError when it is not one."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid duration {text!r} (e.g. 30m, 12h, 7d)")
    return int(match.group(1)) * DURATION_UNITS[match.group(2)]


def format_duration(seconds: int) -> str:
    """`seconds` (> 0) as a duration the schemas accept: exactly, in the largest whole unit
    (86400: 1d, 5400: 90m), the inverse of duration_seconds; a count too large for any unit
    (1000001 s) is rounded up in the smallest unit that holds it (16667m), never cut short.
    ValueError past 999999 days."""
    units = sorted(DURATION_UNITS.items(), key=lambda u: u[1])
    for unit, size in reversed(units):
        if seconds % size == 0 and 0 < seconds // size <= 999_999:
            return f"{seconds // size}{unit}"
    for unit, size in units:
        count = -(-seconds // size)
        if 0 < count <= 999_999:
            return f"{count}{unit}"
    raise ValueError(f"{seconds} s is longer than 999999 days")
