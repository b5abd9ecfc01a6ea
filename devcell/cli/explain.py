"""`devcell explain KIND[.field.path] [--recursive]`: a field's documentation, as kubectl's.

Read from the kind's JSON Schema (devcell/schemas), the same file that validates manifests, so
what `explain` says can never drift from what `apply` accepts: the field's type, whether it is
required, its default, its allowed values, its description and its child fields.
"""

from __future__ import annotations

import textwrap
from typing import Any

from devcell import kinds, schemas
from devcell.errors import FieldNotFound, UsageError
from devcell.names import printable

WIDTH = 80


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """`node` with a `$ref` to a shared definition merged in (the field's own keys win)."""
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        merged = dict(root["$defs"][ref.split("/")[-1]])
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        return merged
    return node


def type_name(node: dict[str, Any], root: dict[str, Any]) -> str:
    """kubectl's spelling of a schema type: string, integer, Object, []Object, map[string]string."""
    node = _resolve(node, root)
    if "const" in node or "enum" in node:
        values = node.get("enum", [node.get("const")])
        kinds_of = {type(v).__name__ for v in values}
        return {"str": "string", "int": "integer", "bool": "boolean"}.get(
            kinds_of.pop() if len(kinds_of) == 1 else "", "string")
    t = node.get("type")
    if t == "array":
        items = node.get("items")
        return "[]" + (type_name(items, root) if isinstance(items, dict) else "string")
    if t == "object" or "properties" in node:
        if "properties" not in node and isinstance(node.get("additionalProperties"), dict):
            return f"map[string]{type_name(node['additionalProperties'], root)}"
        return "Object"
    return str(t or "Object")


def _children(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """The fields below `node` (an array's are its items'), with the set of required ones."""
    node = _resolve(node, root)
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        node = _resolve(node["items"], root)
    props: dict[str, Any] = node.get("properties", {})
    return props


def _required(node: dict[str, Any], root: dict[str, Any]) -> set[str]:
    node = _resolve(node, root)
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        node = _resolve(node["items"], root)
    return set(node.get("required", []))


def _kind_and_path(target: str) -> tuple[str, str, list[str]]:
    """(schema key, kind name, field path) of `cell.spec.services`; usage error otherwise."""
    word, _, rest = target.partition(".")
    kind = kinds.by_word(word)
    if kind is not None:
        key, name = kind.schema, kind.name
    elif word.lower() in schemas.OTHERS:
        key, name = word.lower(), schemas.OTHERS[word.lower()]
    else:
        known = sorted({*kinds.words(), *schemas.OTHERS})
        raise UsageError(f"unknown resource type '{printable(word)}' (one of: {', '.join(known)})")
    path = rest.split(".") if rest else []
    if any(part == "" for part in path):
        raise UsageError(f"invalid field path '{printable(target)}': empty field name")
    return key, name, path


def child_paths(partial: str) -> list[str]:
    """Completions of a partly typed `KIND.field.pa`: every `KIND.field.path` it could become
    by one more field (empty when the part before the last dot names no field)."""
    head, _, tail = partial.rpartition(".")
    try:
        key, _, path = _kind_and_path(head)
    except UsageError:
        return []
    root = schemas.schema(key)
    node: dict[str, Any] = root
    for part in path:
        node = _children(node, root).get(part, {})
    return [f"{head}.{name}" for name in sorted(_children(node, root)) if name.startswith(tail)]


def explain(target: str, *, recursive: bool = False) -> str:
    """The text `devcell explain TARGET` prints."""
    key, kind_name, path = _kind_and_path(target)
    root = schemas.schema(key)
    node, required = root, False
    for depth, part in enumerate(path):
        fields = _children(node, root)
        if part not in fields:
            walked = ".".join(path[:depth]) or kind_name
            known = ", ".join(sorted(fields)) or "none: it has no fields"
            raise FieldNotFound(
                f'field "{printable(".".join(path))}" does not exist in {kind_name}: '
                f"{printable(walked)} has no field '{printable(part)}' (its fields: {known})")
        required = part in _required(node, root)
        node = fields[part]
    node = _resolve(node, root)
    version = root["properties"]["apiVersion"].get("const", "")
    out = [f"KIND:       {kind_name}", f"VERSION:    {version}", ""]
    if path:
        flag = " -required-" if required else ""
        out += [f"FIELD: {'.'.join(path)} <{type_name(node, root)}>{flag}", ""]
    out += ["DESCRIPTION:", *_wrapped(node.get("description") or "<empty>", "    "), ""]
    out += _facts(node)
    children = _children(node, root)
    if children:
        out.append("FIELDS:")
        out += (_tree(node, root, "  ") if recursive else _fields(node, root))
    return "\n".join(out).rstrip("\n") + "\n"


def _facts(node: dict[str, Any]) -> list[str]:
    """DEFAULT and ENUM (a const is a one-value enum), each followed by a blank line."""
    out: list[str] = []
    if "default" in node:
        out += [f"DEFAULT:    {_value(node['default'])}", ""]
    values = node["enum"] if "enum" in node else [node["const"]] if "const" in node else None
    if values is not None:
        out += ["ENUM:", *(f"    {_value(v)}" for v in values), ""]
    return out


def _value(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)


def _wrapped(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH - len(indent), initial_indent=indent,
                         subsequent_indent=indent) or [indent.rstrip()]


def _header(name: str, child: dict[str, Any], root: dict[str, Any], required: set[str]) -> str:
    flag = " -required-" if name in required else ""
    return f"{name}\t<{type_name(child, root)}>{flag}"


def _fields(node: dict[str, Any], root: dict[str, Any]) -> list[str]:
    """One entry per child: name, type, required flag, then its description indented."""
    out: list[str] = []
    required = _required(node, root)
    for name, child in sorted(_children(node, root).items()):
        resolved = _resolve(child, root)
        out.append("  " + _header(name, child, root, required))
        text = resolved.get("description") or "<no description>"
        if "default" in resolved:
            text += f" Default: {_value(resolved['default'])}."
        if "enum" in resolved:
            text += " One of: " + ", ".join(_value(v) for v in resolved["enum"]) + "."
        out += _wrapped(text, "    ")
        out.append("")
    return out


def _tree(node: dict[str, Any], root: dict[str, Any], indent: str) -> list[str]:
    """--recursive: every field below `node`, names and types only, indented by depth."""
    out: list[str] = []
    required = _required(node, root)
    for name, child in sorted(_children(node, root).items()):
        out.append(indent + _header(name, child, root, required))
        out += _tree(child, root, indent + "  ")
    return out
