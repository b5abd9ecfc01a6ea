"""DevCell's Firecracker contract compared with Firecracker's own API description.

CI checks the driver's requests against firecracker_contract.py only. A maintainer re-checks
that contract against upstream by pointing DEVCELL_FIRECRACKER_SWAGGER at a copy of
src/firecracker/swagger/firecracker.yaml (at the commit the contract names, or a newer one to
see what changed); without it this module is not collected (tests/backends/vm/conftest.py).
The copy is read, never kept here.

Compared per endpoint: the operation exists with that method, its documented success status,
whether a body is required, and in each body (nested objects too) the field names, required
fields, types, allowed words and numeric bounds. Descriptions, defaults and examples are not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.backends.vm import firecracker_contract as contract

KEPT = ("type", "enum", "minimum", "maximum", "required", "properties", "items",
        "additionalProperties")


def upstream() -> dict[str, Any]:
    where = os.environ.get("DEVCELL_FIRECRACKER_SWAGGER")
    if not where:
        pytest.skip("DEVCELL_FIRECRACKER_SWAGGER is not set (a copy of upstream's "
                    f"{contract.UPSTREAM_PATH})")
    loaded = yaml.safe_load(Path(where).read_text())
    assert isinstance(loaded, dict) and loaded.get("swagger") == "2.0", where
    return loaded


def facts(schema: Any, definitions: dict[str, Any], *, ours: bool) -> Any:
    """The comparable facts of a schema: $refs followed, prose dropped, enums as sets.

    Upstream's objects allow unknown fields (ours refuse them on purpose), so an object's
    `additionalProperties: false` is dropped from ours; a map's value schema is kept.
    """
    if "$ref" in schema:
        return facts(definitions[schema["$ref"].rsplit("/", 1)[1]], definitions, ours=ours)
    out: dict[str, Any] = {}
    for key in KEPT:
        if key not in schema:
            continue
        value = schema[key]
        if key == "properties":
            value = {name: facts(v, definitions, ours=ours) for name, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            value = facts(value, definitions, ours=ours)
        elif key == "additionalProperties" and value is False and ours:
            continue
        elif key in ("enum", "required"):
            # YAML 1.1 reads a bare Off as false: upstream's logger level "Off"
            value = frozenset("Off" if v is False else v for v in value)
        out[key] = value
    return out


def operation(spec: dict[str, Any], each: contract.Endpoint) -> dict[str, Any]:
    ops = spec["paths"].get(each.path) or {}
    op = ops.get(each.method.lower())
    assert op is not None, f"upstream has no {each.method} {each.path}"
    return dict(op)


@pytest.mark.parametrize("each", contract.ENDPOINTS, ids=lambda e: f"{e.method} {e.path}")
def test_each_endpoint_matches_upstreams_description(each: contract.Endpoint) -> None:
    spec = upstream()
    op = operation(spec, each)
    assert each.success in op["responses"], (each, sorted(map(str, op["responses"])))
    bodies = [p for p in op.get("parameters", []) if p.get("in") == "body"]
    if each.body is None:
        assert bodies == []
        return
    assert len(bodies) == 1
    assert bool(bodies[0].get("required")) == each.body_required
    theirs = facts(bodies[0]["schema"], spec["definitions"], ours=False)
    assert facts(each.body, {}, ours=True) == theirs


def test_the_answer_to_get_slash_matches_upstreams_instance_info() -> None:
    spec = upstream()
    reply = operation(spec, contract.ENDPOINTS[0])["responses"][200]["schema"]
    assert facts(contract.INSTANCE_INFO, {}, ours=True) == \
        facts(reply, spec["definitions"], ours=False)
