"""`.json` manifests are strict JSON with positions, and agree with json.loads on values."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devcell.manifests import jsonsafe
from devcell.manifests.yamlsafe import MAX_DEPTH, YamlSyntaxError

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(_json, st.booleans())
def test_values_agree_with_the_standard_library(value: Any, indent: bool) -> None:
    text = json.dumps(value, indent=2 if indent else None)
    [doc] = jsonsafe.parse_document(text)
    assert doc.data == json.loads(text)


@pytest.mark.parametrize(("text", "message", "where"), [
    ('{"a": 1,}', "trailing comma is not allowed", (1, 8)),
    ('[1, 2,\n]', "trailing comma is not allowed", (1, 6)),
    ("{'a': 1}", "expected a key in double quotes", (1, 2)),
    ('{"a": 1} {"b": 2}', "unexpected text after the document", (1, 10)),
    ('{"a": NaN}', "expected a value, found 'N'", (1, 7)),
    ('{"a": 1 // c\n}', 'expected "," or "}"', (1, 9)),
    ('{"a": "x\ty"}', "invalid control character", (1, 9)),
    ('{"a": ', "expected a value at the end of the file", (1, 7)),
])
def test_what_json_tools_refuse_is_refused_with_its_position(
        text: str, message: str, where: tuple[int, int]) -> None:
    with pytest.raises(YamlSyntaxError) as refused:
        jsonsafe.parse_document(text)
    assert message in refused.value.message
    assert (refused.value.line, refused.value.column) == where


def test_positions_and_duplicate_keys() -> None:
    [doc] = jsonsafe.parse_document('{\n  "a": {"b": [1,\n    2]},\n  "a": 3\n}')
    assert doc.positions[("a", "b", 1)] == (3, 5)
    assert doc.key_positions[("a",)] == (2, 3)
    [dup] = doc.problems
    assert (dup.line, dup.column, dup.path) == (4, 3, ("a",))
    assert doc.data == {"a": {"b": [1, 2]}}  # the first value wins, as in the YAML reader


def test_nesting_is_bounded_before_recursion() -> None:
    with pytest.raises(YamlSyntaxError, match="nesting deeper"):
        jsonsafe.parse_document("[" * 100_000)
    [doc] = jsonsafe.parse_document("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert doc.data is not None


def test_only_whitespace_is_no_document() -> None:
    assert jsonsafe.parse_document(" \n\t") == []
