"""`logs --since` and `--tail` on the edges of their ranges (issue 31, item 9): a time whose
offset carries it past year 1 or year 9999 is one clear error, never an OverflowError, and a
bad line count never names the converter's Python name."""

from __future__ import annotations

import argparse

import pytest

from devcell.api import log_lines
from devcell.cli import arguments


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+01:00", "0001-01-01T00:59:59+01:00",
                                   "9999-12-31T23:59:59-01:00", "9999-12-31T23:00:00-23:59"])
def test_a_time_out_of_range_once_in_utc_is_a_clear_error(value: str) -> None:
    with pytest.raises(ValueError) as refused:
        log_lines.since_cutoff(value, 1_700_000_000.0)
    assert str(refused.value).startswith(f"invalid --since {value!r}: ")
    assert "year 1" in str(refused.value) and "9999" in str(refused.value)


def test_the_edges_that_stay_in_range_are_kept() -> None:
    assert log_lines.since_cutoff("0001-01-01T01:00:00+01:00", 0.0) == "0001-01-01T00:00:00"
    assert log_lines.since_cutoff("9999-12-31T22:00:00-01:00", 0.0) == "9999-12-31T23:00:00"


@pytest.mark.parametrize("value", ["²", "٣", "-5", "", " 5", "1" * 30, "5\0"])
def test_a_bad_tail_is_said_as_a_line_count(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        arguments.tail_lines(value)
    assert "invalid line count" in str(refused.value)


@pytest.mark.parametrize("value, lines", [("0", 0), ("-1", -1), ("250", 250)])
def test_good_tails(value: str, lines: int) -> None:
    assert arguments.tail_lines(value) == lines
