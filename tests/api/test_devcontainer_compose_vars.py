"""Compose's variable interpolation (devcontainer_compose_vars), case by case as compose
fills them in, and what it refuses where compose would have filled in an empty string."""

from __future__ import annotations

import pytest

from devcell.api.devcontainer_compose_vars import fill

ENV = {"SET": "value", "EMPTY": "", "OTHER": "other"}


@pytest.mark.parametrize(("text", "expected"), [
    ("plain", "plain"),
    ("$SET and ${SET}", "value and value"),
    ("$$SET costs $$5", "$SET costs $5"),
    ("${UNSET:-default}", "default"),
    ("${EMPTY:-default}|${EMPTY-default}", "default|"),
    ("${UNSET-default}", "default"),
    ("${SET:+replaced}|${UNSET:+replaced}|${EMPTY+kept}", "replaced||kept"),
    ("${UNSET:-${OTHER}}", "other"),
    ("${UNSET:-${ALSO_UNSET:-deep}}", "deep"),
    ("${SET:?must be set}", "value"),
    ("a $ alone, $1 and $- stay", "a $ alone, $1 and $- stay"),
    ("postgres://u:${SET}@db:5432/${SET}", "postgres://u:value@db:5432/value"),
])
def test_filled_as_compose_fills_them(text: str, expected: str) -> None:
    assert fill(text, ENV) == (expected, [])


@pytest.mark.parametrize(("text", "problem"), [
    ("${UNSET}", "UNSET is not set (in the environment or .env) and has no default"),
    ("$UNSET/x", "UNSET is not set"),
    ("${UNSET:?give the API's address}", "UNSET is required: give the API's address"),
    ("${EMPTY:?}", "EMPTY is required and not set"),
    ("${UNSET:-${ALSO_UNSET}}", "ALSO_UNSET is not set"),
    ("${SET", "is not closed"),
    ("${1BAD}", "${1BAD} is not a variable compose reads"),
    ("${SET/x/y}", "${SET/x/y} is not a variable compose reads"),
])
def test_what_is_refused_by_name(text: str, problem: str) -> None:
    _, problems = fill(text, ENV)
    assert len(problems) == 1 and problem in problems[0], problems


def test_each_problem_is_said_once() -> None:
    assert len(fill("$UNSET ${UNSET} ${UNSET}", ENV)[1]) == 1


def test_a_value_cannot_grow_without_bound() -> None:
    big = {"X": "x" * 100_000}
    assert fill("$X" * 10, big)[1] == []
    assert fill("$X" * 11, big) == ("", ["the value grows past 1 MiB once its variables are "
                                         "filled in"])
