"""How tables show ages and sizes (api/render.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from devcell.api import render


def test_an_age_without_an_offset_is_read_as_utc() -> None:
    """A stamp with no offset (a server's node or row: attack44) raised TypeError, naive minus
    aware, a traceback of `get nodes` through a server; it is UTC, as the Z ones."""
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    assert render.age("2026-12-06T11:00:00", now) == render.age("2026-12-06T11:00:00Z", now)
    assert render.age("2026-12-06T11:00:00", now) == "60m"
    assert render.age("not a time", now) == "<invalid>"
