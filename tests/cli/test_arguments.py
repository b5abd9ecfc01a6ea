"""The CLI's argument types (cli/arguments.py): --keep-pruned's seconds, and the duration a
kept workspace's safety snapshot is given as its ttl (manifests/quantities.format_duration)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("value", "seconds"), [
    (None, 86_400), (0, 0), (1, 1), (1.2, 2), (3600, 3600), (999_999 * 86_400, 999_999 * 86_400)])
def test_keep_pruned_takes_whole_seconds(value: float | None, seconds: int) -> None:
    from devcell.cli.arguments import keep_seconds

    assert keep_seconds(value) == seconds


@pytest.mark.parametrize("value", [0.001, 0.5, 999_999 * 86_400 + 1])
def test_keep_pruned_under_a_second_or_past_the_longest_ttl_is_refused(value: float) -> None:
    """`1ms` became 0, which keeps nothing, without a word; `1000000h` was cut to 11 days."""
    from devcell.cli.arguments import keep_seconds
    from devcell.errors import UsageError

    with pytest.raises(UsageError, match="--keep-pruned"):
        keep_seconds(value)


@pytest.mark.parametrize(("seconds", "text"), [
    (86_400, "1d"), (5400, "90m"), (59, "59s"), (1_000_001, "16667m"),
    (3_600_000_000, "41667d"), (999_999 * 86_400, "999999d")])
def test_a_keep_time_is_written_exactly_or_rounded_up_never_cut(seconds: int, text: str) -> None:
    from devcell.manifests import quantities

    assert quantities.format_duration(seconds) == text
    assert quantities.duration_seconds(text) >= seconds
