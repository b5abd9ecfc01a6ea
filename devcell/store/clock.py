"""The store's clock: every timestamp the state database records, in one sortable form.

A leaf (the standard library only), so the migrations, the guard and the database write the
same form without importing each other.
"""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> str:
    """UTC timestamp with milliseconds, sortable as text."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
