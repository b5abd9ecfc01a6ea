"""`devcell logs --tail N --since D --timestamps` on a real container cell, run as a user runs
them: the supervisor stamps each line in the cell, the CLI filters on the host."""

from __future__ import annotations

import re
import textwrap
import time
from pathlib import Path

import pytest

from tests.backends.engine import IMAGE
from tests.conftest import Cli

STAMPED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


@pytest.fixture
def counter(engine: None, cli: Cli, tmp_path: Path, state: Path) -> str:
    manifest = tmp_path / "cell.yaml"
    manifest.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: counter}}
        spec:
          backend: container
          image: {IMAGE}
          network: {{mode: none}}
          services:
            - name: count
              command: [sh, -c, "echo one; echo two; echo three; sleep 2; echo late; exec sleep 600"]
            - name: idle
              command: [sleep, "600"]
        """))
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    deadline = time.monotonic() + 30
    while "late" not in cli("logs", "counter", "count").stdout:
        assert time.monotonic() < deadline, "the service never logged 'late'"
        time.sleep(0.2)
    return "counter"


def test_logs_show_lines_as_written_and_timestamps_on_request(cli: Cli, counter: str) -> None:
    plain = cli("logs", counter, "count")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == "[devcell] starting count\none\ntwo\nthree\nlate\n"
    stamped = cli("logs", counter, "count", "--timestamps").stdout.splitlines()
    assert len(stamped) == 5 and all(STAMPED.match(line) for line in stamped), stamped
    assert [STAMPED.sub("", line, count=1) for line in stamped] == plain.stdout.splitlines()
    both = cli("logs", counter, "--timestamps").stdout  # every service: prefix, then the time
    assert re.search(r"^\[idle\] \d{4}-\S+Z \[devcell\] starting idle$", both, re.M), both


def test_logs_tail_prints_the_last_lines_of_each_service(cli: Cli, counter: str) -> None:
    assert cli("logs", counter, "count", "--tail", "2").stdout == "three\nlate\n"
    assert cli("logs", counter, "count", "--tail", "0").stdout == ""
    assert cli("logs", counter, "count", "--tail", "-1").stdout.count("\n") == 5
    every = cli("logs", counter, "--tail", "1").stdout
    assert every == "[count] late\n[idle] [devcell] starting idle\n"
    bad = cli("logs", counter, "--tail", "x")
    assert bad.returncode == 2 and "invalid line count 'x'" in bad.stderr


def test_logs_since_a_duration_or_a_time(cli: Cli, counter: str) -> None:
    stamped = cli("logs", counter, "count", "--timestamps").stdout.splitlines()
    late_at = stamped[-1].split(" ", 1)[0]
    assert stamped[1].split(" ", 1)[0] < late_at  # 'one' was written two seconds earlier
    since_late = cli("logs", counter, "count", "--since", late_at)
    assert since_late.returncode == 0 and since_late.stdout == "late\n", since_late.stderr
    assert cli("logs", counter, "count", "--since-time", late_at).stdout == "late\n"
    assert cli("logs", counter, "count", "--since", "1h").stdout.count("\n") == 5
    time.sleep(2.2)  # the service only sleeps now: nothing was written in the last second
    assert cli("logs", counter, "count", "--since", "1s").stdout == ""
    bad = cli("logs", counter, "count", "--since", "yesterday")
    assert bad.returncode == 2 and "invalid --since 'yesterday'" in bad.stderr


def test_a_service_exit_status_is_still_recorded_through_the_stamping(
        cli: Cli, engine: None, tmp_path: Path, state: Path) -> None:
    manifest = tmp_path / "flaky.yaml"
    manifest.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: flaky}}
        spec:
          backend: container
          image: {IMAGE}
          network: {{mode: none}}
          services:
            - name: once
              restart: OnFailure
              command: [sh, -c, "echo failing; exit 3"]
        """))
    assert cli("apply", "-f", str(manifest)).returncode == 0
    deadline = time.monotonic() + 30
    while cli("logs", "flaky", "once").stdout.count("exited with status 3") < 2:
        assert time.monotonic() < deadline, cli("logs", "flaky", "once").stdout
        time.sleep(0.2)  # OnFailure restarted it: the status 3 reached the supervisor
