"""Output formats: kubectl-style tables, YAML, JSON and names."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from devcell.api.text import age, age_seconds, service, table

__all__ = ["age", "age_seconds", "as_json", "as_list", "as_yaml", "service", "services",
           "sidecars", "size", "table"]


def services(raw: str | dict[str, Any] | None) -> str | None:
    """A cell's `status.services` (as stored: JSON text, or parsed) in one cell of a table."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, dict) or not raw:
        return None
    return " ".join(service(str(name), view) for name, view in raw.items()
                    if isinstance(view, dict))


def sidecars(raw: str | dict[str, Any] | None) -> str | None:
    """A cell's `status.sidecars` in one cell of a table: `db:running cache:exited`."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, dict) or not raw:
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
