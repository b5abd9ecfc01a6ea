"""The fast validator (fastjsonschema) and the reference one (jsonschema) always agree.

The fast one decides the common case (valid input) alone, so a disagreement would let an
invalid document through or refuse a valid one.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcell import schemas
from devcell.manifests import validate
from tests.conftest import EXAMPLES

BAD_INPUTS = Path(__file__).resolve().parent.parent / "e2e" / "bad_inputs"


@functools.cache
def _reference(kind: str) -> Any:
    schema = schemas.schema(kind)
    return jsonschema.validators.validator_for(schema)(schema)


def reference_valid(kind: str, data: Any) -> bool:
    return bool(_reference(kind).is_valid(data))


def _documents() -> list[Any]:
    docs = []
    for path in sorted(EXAMPLES.glob("*")) + sorted(BAD_INPUTS.rglob("*.y*ml")):
        text = path.read_text(errors="replace")
        if "&" in text:  # the alias bomb: PyYAML's own loader would expand it
            continue
        try:
            docs.extend(d for d in yaml.safe_load_all(text) if isinstance(d, dict))
        except (yaml.YAMLError, UnicodeDecodeError, ValueError):
            continue
    return docs


@pytest.mark.parametrize("doc", _documents(), ids=lambda d: str(d.get("metadata", {}))[:40])
def test_agree_on_examples_and_bad_inputs(doc: dict[str, Any]) -> None:
    kind = doc.get("kind") if doc.get("kind") in ("Cell", "Snapshot") else "Cell"
    before = copy.deepcopy(doc)
    assert validate.is_valid_fast(kind, doc) == reference_valid(kind, doc)
    assert doc == before, "validation must not change the document (no defaults filled in)"


scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=False),
                    st.text(max_size=8), st.sampled_from(["fake", "container", "Running", "none",
                                                          "api", "/workspace", "512Mi", "a/b"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["name", "command", "value", "secret", "cpus", "memory",
                                     "mode", "ports", "containerPort", "snapshot", "x"]),
                    inner, max_size=3)), max_leaves=8)
SPEC_KEYS = ["backend", "image", "state", "workspace", "services", "env", "resources", "network",
             "hooks", "cell", "bogus"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["Cell", "Snapshot"]),
       name=st.one_of(st.sampled_from(["api", "a-b", "A", "-x", "x" * 64]), st.text(max_size=6)),
       spec=st.dictionaries(st.sampled_from(SPEC_KEYS), values, max_size=5),
       labels=st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=5), st.integers()),
                              max_size=2))
def test_agree_on_generated_documents(kind: str, name: str, spec: dict[str, Any],
                                      labels: dict[str, Any]) -> None:
    doc = {"apiVersion": "devcell.dev/v1alpha1", "kind": kind,
           "metadata": {"name": name, "labels": labels}, "spec": spec}
    assert validate.is_valid_fast(kind, doc) == reference_valid(kind, doc)


@settings(max_examples=100, deadline=None)
@given(state=st.sampled_from(["Running", "Stopped", "Sleeping", "running", 1]),
       cpus=st.one_of(st.floats(-1, 2000, allow_nan=False), st.integers(-1, 2000)),
       memory=st.sampled_from(["512Mi", "1Gi", "12", "1.5Gi", "lots"]),
       port=st.integers(-1, 70000), mode=st.sampled_from(["none", "host", "bridge", "on"]))
def test_agree_on_near_valid_cells(state: Any, cpus: Any, memory: str, port: int, mode: str
                                   ) -> None:
    doc = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": "api"},
           "spec": {"backend": "fake", "state": state, "resources": {"cpus": cpus, "memory": memory},
                    "network": {"mode": mode, "ports": [{"containerPort": port}]}}}
    assert validate.is_valid_fast("Cell", doc) == reference_valid("Cell", doc)
