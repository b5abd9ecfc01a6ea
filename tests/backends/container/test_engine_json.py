"""engine_json reads and writes what json does (its whole reason is to skip json's import):
the same value from the same bytes, the same text from the same value, a ValueError where
json.loads raises one (for UTF-8: the engine's answers are)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from devcell.backends.container import engine_json

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30)


def _same(one: object, other: object) -> bool:
    """Equal, a NaN equal to a NaN."""
    if isinstance(one, float) and isinstance(other, float) and math.isnan(one):
        return math.isnan(other)
    if isinstance(one, list) and isinstance(other, list):
        return len(one) == len(other) and all(map(_same, one, other))
    if isinstance(one, dict) and isinstance(other, dict):
        return one.keys() == other.keys() and all(_same(one[k], other[k]) for k in one)
    return type(one) is type(other) and one == other


@given(VALUES)
def test_the_same_text_and_the_same_value_as_json(value: object) -> None:
    text = json.dumps(value)
    assert engine_json.dumps(value) == text
    for spaced in (text, f" \n\t{text}\r\n "):
        assert _same(engine_json.loads(spaced.encode()), json.loads(spaced.encode()))


@given(st.binary(max_size=40) | st.text(max_size=40).map(str.encode))
def test_what_json_refuses_is_a_value_error_and_what_it_reads_is_read_alike(
        data: bytes) -> None:
    assume(json.detect_encoding(data) in ("utf-8", "utf-8-sig"))  # the engine speaks UTF-8
    try:
        expected = json.loads(data)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        with pytest.raises(ValueError):
            engine_json.loads(data)
    else:
        assert _same(engine_json.loads(data), expected)


@pytest.mark.parametrize("data", [
    b"", b" ", b"{", b'{"a": ', b'{"a": 1} x', b'"unterminated', b"[1,]", b"nul", b"\xff",
    b'{"Id": "ab\x01"}',  # a control character in a string: json's strict mode refuses it
])
def test_malformed_answers_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(data)
    with pytest.raises(ValueError):
        engine_json.loads(data)


def test_an_engine_answer_and_a_bom() -> None:
    answer = (b'[{"Id":"4f1c","Labels":{"dev.devcell.managed":"true"},"State":"running",'
              b'"Created":1733400000,"SizeRw":null}]\n')
    assert engine_json.loads(answer) == json.loads(answer)
    assert engine_json.loads(b"\xef\xbb\xbf" + answer) == json.loads(b"\xef\xbb\xbf" + answer)


def test_what_json_cannot_write_is_refused_alike() -> None:
    for value in (object(), {1j: 1}, {"a": {1, 2}}):
        with pytest.raises(TypeError):
            json.dumps(value)
        with pytest.raises(TypeError):
            engine_json.dumps(value)
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular"):
        engine_json.dumps(looped)
