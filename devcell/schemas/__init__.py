"""One JSON Schema per kind, shipped as package data so editors can validate manifests."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

OTHERS = {"config": "Config"}
"""Schemas of DevCell's own files (not manifests)."""


def schema_text(kind: str) -> str:
    """The schema for `kind` (Cell, cell, cells…) exactly as shipped."""
    from devcell import kinds

    found = kinds.by_word(kind)
    key = found.schema if found is not None else kind.lower().rstrip("s")
    if found is None and key not in OTHERS:
        raise KeyError(kind)
    return resources.files(__package__).joinpath(f"{key}.schema.json").read_text("utf-8")


@cache
def schema(kind: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(schema_text(kind))
    return loaded
