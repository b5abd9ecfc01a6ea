"""Text as DevCell prints it: kubectl-style ages and tables, a service's state in a word.

Below the command line (cli/render.py re-exports these) so that what the HTTP API answers as
text, `describe`'s (api/describe.py), is made by the same code as the CLI's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from datetime import datetime


def age(stamp: str | None, now: datetime | None = None) -> str:
    """`2026-11-29T10:00:00.000Z` -> `5m`, `3h`, `2d` as kubectl shows ages."""
    from datetime import UTC, datetime  # only describe and events need it

    if not stamp:
        return "<none>"
    now = now or datetime.now(UTC)
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    seconds = int((now - then).total_seconds())
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    if seconds < 3600 * 2:
        return f"{seconds // 60}m"
    if seconds < 86400 * 2:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def age_seconds(seconds: int | None) -> str:
    if seconds is None:
        return "<none>"
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def service(name: str, view: dict[str, Any]) -> str:
    """One service as `get -o wide` and `describe` show it: `web:ready`,
    `db:crash-looping(restarts=5,exit=127)`."""
    details = []
    if view.get("restarts"):
        details.append(f"restarts={view['restarts']}")
    if view.get("lastExit") not in (None, 0) and view.get("state") != "ready":
        details.append(f"exit={view['lastExit']}")
    return f"{name}:{view.get('state', '?')}" + (f"({','.join(details)})" if details else "")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO | None = None, *,
          no_headers: bool = False) -> None:
    """Every cell and header escaped (names.printable; headers come from -L and custom
    columns): one place for every table DevCell prints. `no_headers` leaves out the header
    line (the columns keep the headers' widths)."""
    from devcell.names import printable

    headers = [printable(h) for h in headers]
    text_rows = [[("<none>" if v is None or v == "" else printable(str(v))) for v in row]
                 for row in rows]
    widths = [len(h) for h in headers]
    if text_rows:
        columns = zip(*text_rows, strict=True)
        widths = [max(w, *map(len, col)) for w, col in zip(widths, columns, strict=True)]
    fmt_parts = [f"{{:<{w}}}" for w in widths[:-1]] + ["{}"]
    fmt = "   ".join(fmt_parts)
    lines = [] if no_headers else [fmt.format(*headers).rstrip()]
    lines.extend(fmt.format(*row).rstrip() for row in text_rows)
    if lines:
        (out or sys.stdout).write("\n".join(lines) + "\n")
