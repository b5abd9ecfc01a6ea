"""Output formats: kubectl-style tables, YAML, JSON and names.

Below the command line so that the text the HTTP API answers (`describe`'s: api/describe.py)
is made by the same code as the CLI's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    from datetime import datetime
    from typing import Any, TextIO


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
    if then.tzinfo is None:  # no offset (a server's, an engine's): UTC, as the Z ones
        then = then.replace(tzinfo=UTC)
    return age_seconds(int((now - then).total_seconds()))


def age_seconds(seconds: int | None) -> str:
    """Seconds as kubectl shows an age: 45s, 12m, 3h, 2d (`<none>`: no time known)."""
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


def _status_map(raw: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """A status map as stored (JSON text) or parsed; None when empty or not a map."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    return raw if isinstance(raw, dict) and raw else None


def services(raw: str | dict[str, Any] | None) -> str | None:
    """A cell's `status.services` (as stored: JSON text, or parsed) in one cell of a table."""
    if (raw := _status_map(raw)) is None:
        return None
    return " ".join(service(str(name), view) for name, view in raw.items()
                    if isinstance(view, dict))


def sidecars(raw: str | dict[str, Any] | None) -> str | None:
    """A cell's `status.sidecars` in one cell of a table: `db:running cache:exited`."""
    if (raw := _status_map(raw)) is None:
        return None
    return " ".join(f"{name}:{view.get('state', '?') if isinstance(view, dict) else '?'}"
                    for name, view in raw.items())


def size(n: int) -> str:
    """Bytes as `docker system df` shows them: 0 B, 512 B, 4.0 KiB, 1.2 GiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError(n)


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


def _unsafe(text: str) -> bool:
    """Whether `text` holds a character a terminal may act on (besides the line breaks)."""
    return not text.replace("\n", "").isprintable()


def as_json(value: Any, out: TextIO | None = None) -> None:
    """`value` as JSON on `out` (default: sys.stdout as it is when called, not when imported)."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    if _unsafe(text):
        # JSON escapes C0 controls itself, not C1 (\x9b) or bidi controls: escape them too,
        # as \\uXXXX inside strings (outside strings there is only JSON's own whitespace).
        text = "".join(c if c == "\n" or c.isprintable() else json.dumps(c)[1:-1]
                       for c in text)
    (out or sys.stdout).write(text + "\n")


def as_yaml(value: Any, out: TextIO | None = None) -> None:
    import yaml

    text = yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False)
    if _unsafe(text):  # then every character that is not ASCII is written as its escape
        text = yaml.safe_dump(value, sort_keys=False, default_flow_style=False)
    (out or sys.stdout).write(text)


def as_list(items: list[Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": items}
