"""A list of cells or snapshots in pages, as Kubernetes pages its lists: `limit` items at most,
and a `continue` token in the list's metadata while more remain, which the next request
sends back to get the next page.

The token says where the page ended (the last name sent: these lists are in name order, and
a live name is one object's), for which list (the resource and its labelSelector), and
nothing else: it grants nothing, and one that is not exactly what this server gives for this
list (not base64url JSON, other fields, another list's, a name that cannot be one) is
refused as a 400, never followed. Each page is the database as it is when that page is read,
so every object is sent at most once and one present from the first page to the last exactly
once; what changed meanwhile a watch from the first page's resourceVersion says.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from devcell.errors import UsageError
from devcell.names import name_problem, printable

MAX_LIMIT = 10000
MAX_TOKEN = 256
"""Characters of a continue token (a name is at most 63, the selector a digest)."""
PAGED = frozenset({"cells", "snapshots"})
"""The lists that page: in name order. Operations and events lists are the latest 500."""
_VERSION = 1


def limit(given: str | None) -> int | None:
    """The `limit` query parameter: 1 to MAX_LIMIT (None: the whole list)."""
    if given is None:
        return None
    if not given.isascii() or not given.isdigit() or len(given) > 6 or \
            not 1 <= int(given) <= MAX_LIMIT:
        raise UsageError(f"limit: 1 to {MAX_LIMIT}, not {printable(given)!r}")
    return int(given)


def token(resource: str, selector: str, after: str) -> str:
    """The continue token of a page that ended at the name `after`."""
    data = json.dumps({"v": _VERSION, "r": resource, "q": _digest(selector), "a": after},
                      separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def after(given: str, resource: str, selector: str) -> str:
    """The name the page of `given` ended at, when `given` is a token this server gave for
    this list (`resource`, its labelSelector `selector`); else a UsageError (400)."""
    refused = UsageError("continue: not a token this list gave (send back a list's "
                         "metadata.continue unchanged, with the same labelSelector)")
    if not given or len(given) > MAX_TOKEN or not given.isascii():
        raise refused
    try:
        decoded: Any = json.loads(base64.urlsafe_b64decode(given + "=" * (-len(given) % 4)))
    except (binascii.Error, ValueError, RecursionError):
        raise refused from None
    if not isinstance(decoded, dict) or set(decoded) != {"v", "r", "q", "a"} or \
            decoded["v"] != _VERSION or decoded["r"] != resource or decoded["q"] != _digest(selector):
        raise refused
    name = decoded["a"]
    if not isinstance(name, str) or name_problem(name) is not None:
        raise refused
    return name


def _digest(selector: str) -> str:
    """The labelSelector as a token carries it (any length, a token's stays bounded)."""
    return hashlib.sha256(selector.encode()).hexdigest()[:16]


def page(rows: list[dict[str, Any]], start_after: str | None, most: int | None
         ) -> tuple[list[dict[str, Any]], str | None]:
    """The rows (in name order) after the name `start_after`, at most `most` of them, and
    the name the page ends at when more remain (None: this page is the last)."""
    if start_after is not None:
        rows = [r for r in rows if r["name"] > start_after]
    if most is None or len(rows) <= most:
        return rows, None
    rows = rows[:most]
    return rows, str(rows[-1]["name"])
