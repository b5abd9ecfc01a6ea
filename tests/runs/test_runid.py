"""Run ids name a file or a row: which are refused, and the reason given (mutation survivors:
a reason that named the wrong rule passed every store test)."""

from __future__ import annotations

import pytest

from devcell.runs import runid


@pytest.mark.parametrize(("run_id", "reason"), [
    ("a/b", "contains a path separator"),
    ("a\\b", "contains a path separator"),
    ("/etc", "contains a path separator"),
    ("r" * 129, "129 characters long (at most 128)"),
    ("", "run id is empty"),
    ("..", "names a directory"),
    ("a\x00b", "contains a NUL character"),
    ("-op", "must start with a letter or a digit"),
    (7, "must be a string, not int"),
])
def test_refused_run_ids_say_which_rule(run_id: object, reason: str) -> None:
    found = runid.problem(run_id)
    assert found is not None and reason in found


def test_the_longest_run_id_is_accepted() -> None:
    assert runid.problem("r" * runid.MAX_LENGTH) is None
    assert runid.MAX_LENGTH == 128
