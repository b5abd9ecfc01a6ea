"""The fields `devcell get -o yaml|json` shows that a manifest never sets: kubectl accepts its
own output on apply, so DevCell does too.

`get -o yaml | apply -f -` was refused with six unknown fields. Read-only fields are taken out
of a document before it is validated: metadata.id, generation, creationTimestamp and source,
and status, are ignored; metadata.resourceVersion is kept aside, since one given is a
precondition (a stale one is a conflict, checked against recorded state by the store).
"""

from __future__ import annotations

from typing import Any

IGNORED_METADATA = ("id", "generation", "creationTimestamp", "source")
RESOURCE_VERSION = "resourceVersion"


def strip(data: dict[str, Any]) -> tuple[dict[str, Any], object]:
    """`data` without its read-only fields, and the resourceVersion it gave (None if none);
    `data` itself when it has none (the common case copies nothing)."""
    meta = data.get("metadata")
    shown = isinstance(meta, dict) and any(
        k in meta for k in (*IGNORED_METADATA, RESOURCE_VERSION))
    if not shown and "status" not in data:
        return data, None
    out = {k: v for k, v in data.items() if k != "status"}
    if not isinstance(meta, dict):
        return out, None
    out["metadata"] = {k: v for k, v in meta.items()
                       if k not in IGNORED_METADATA and k != RESOURCE_VERSION}
    return out, meta.get(RESOURCE_VERSION)


def resource_version(given: object) -> int | None | str:
    """The resourceVersion given as a number (kubectl writes it as a string of digits), None
    if none, or the problem with it."""
    if given is None:
        return None
    text = str(given) if isinstance(given, (str, int)) and not isinstance(given, bool) else ""
    if not text.isdigit() or len(text) > 18:
        return "must be a resourceVersion as get shows it (a string of digits)"
    return int(text)
