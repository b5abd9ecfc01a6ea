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


OUT_OF_RANGE = [
    ("controller run --manifests . --workers 0", "--workers: invalid worker count '0'"),
    ("controller run --manifests . --workers -1", "--workers: invalid worker count '-1'"),
    ("controller run --manifests . --workers 65", "--workers: invalid worker count '65'"),
    ("controller run --manifests . --workers 2.5", "--workers: invalid worker count '2.5'"),
    ("apply -f x.yaml --workers 0", "--workers: invalid worker count '0'"),
    ("controller run --manifests . --resync 0.5", "--resync: '0.5' is too short"),
    ("controller run --manifests . --resync 10ms", "--resync: '10ms' is too short"),
    ("controller run --manifests . --resync -1", "--resync: invalid duration '-1'"),
    ("controller run --manifests . --keep-pruned 1ms", "--keep-pruned: '1ms' keeps nothing"),
    ("apply -f x.yaml --keep-pruned 0.5", "--keep-pruned: '0.5' keeps nothing"),
    ("apply -f x.yaml --keep-pruned 24000000h", "--keep-pruned: duration '24000000h' is too long"),
    ("apply -f x.yaml --timeout -5s", "--timeout: expected one argument"),
    ("wait cell api --timeout 1e9", "--timeout: invalid duration '1e9'"),
    ("snapshot create api --name s --ttl 0s", "--ttl: invalid duration '0s'"),
    ("snapshot create api --name s --ttl -5m", "--ttl: expected one argument"),
    ("snapshot create api --name s --ttl 1000000d", "--ttl: invalid duration '1000000d'"),
]


@pytest.mark.parametrize(("line", "error"), OUT_OF_RANGE)
def test_a_numeric_flag_out_of_its_range_is_refused_when_parsing(
        line: str, error: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`controller run --workers 0` ran for ever and reconciled nothing: every numeric flag's
    range is checked by the parser (exit 2, one error line), before any command runs."""
    from devcell.cli.parser import parse

    with pytest.raises(SystemExit) as exited:
        parse(line.split())
    assert exited.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"error: argument {error}"), last


@pytest.mark.parametrize("line", [
    "controller run --manifests . --workers 64 --resync 0 --keep-pruned 0",
    "controller run --manifests . --workers 1 --resync 1s --keep-pruned 1s",
    "snapshot create api --name s --ttl 999999d", "wait cell api --timeout 0"])
def test_a_numeric_flag_at_its_bounds_is_taken(line: str) -> None:
    from devcell.cli.parser import parse

    assert parse(line.split()).command in ("controller", "snapshot", "wait")
