"""Walk a kind's schema into documented field paths (used by docs and the docs drift test)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from devcell import schemas


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        merged = dict(root["$defs"][ref.split("/")[-1]])
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        return merged
    return node


def _type_of(node: dict[str, Any]) -> str:
    if "const" in node:
        return f"`{node['const']}`"
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    t = node.get("type", "")
    if t == "array":
        items = node.get("items", {})
        inner = items.get("type", "") if isinstance(items, dict) else ""
        return f"array of {inner}s" if inner else "array"
    if t == "object" and "properties" not in node and "additionalProperties" in node:
        return "map of string to string"
    return str(t)


def walk(kind: str) -> Iterator[tuple[str, str, Any, str]]:
    """(path, type, default, description) for every field of `kind`, depth first."""
    root = schemas.schema(kind)

    def visit(node: dict[str, Any], path: str) -> Iterator[tuple[str, str, Any, str]]:
        node = _resolve(node, root)
        if path:
            yield path, _type_of(node), node.get("default"), node.get("description", "")
        if node.get("type") == "object" or "properties" in node:
            for key, child in node.get("properties", {}).items():
                yield from visit(child, f"{path}.{key}" if path else key)
        if node.get("type") == "array" and isinstance(node.get("items"), dict):
            items = _resolve(node["items"], root)
            if "properties" in items:
                for key, child in items["properties"].items():
                    yield from visit(child, f"{path}[].{key}")

    yield from visit(root, "")
