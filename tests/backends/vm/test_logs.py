"""`devcell logs` of a vm cell through the CLI, as a user runs it, against a real QEMU guest.

One machine for the module (applied through the CLI, so the cell is in the state database):
its `web` service prints what a test drops in /tmp/say; the `quiet` service prints nothing and
is where the hostile tests plant a link to /dev/zero, a FIFO, a 100 MiB file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import processes
from tests.backends.engine import IMAGE
from tests.backends.vm.conftest import make_state
from tests.backends.vm_machines import kill_machines

REPO = Path(__file__).resolve().parents[3]
WEB = ("echo web started; printf 'esc \\033[31mred\\r forged\\n'; "
       "while :; do if [ -f /tmp/say ]; then cat /tmp/say; rm -f /tmp/say; fi; sleep 0.2; done")
STAMPED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")



@dataclass(frozen=True)
class Box:
    """The module's state directory, whose running vm cell is `logbox`."""

    state: Path

    def env(self) -> dict[str, str]:
        env = dict(os.environ, DEVCELL_HOME=str(self.state))
        env.pop("DEVCELL_FAKE_FAIL", None)
        return env

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`devcell ARGS...` as a user runs it."""
        return subprocess.run([sys.executable, "-m", "devcell", *args], capture_output=True,
                              text=True, env=self.env(), cwd=REPO, timeout=timeout)

    def in_guest(self, script: str) -> None:
        done = self("exec", "logbox", "--", "sh", "-c", script)
        assert done.returncode == 0, done.stderr

    def say(self, line: str) -> None:
        """The web service prints `line` (within a second)."""
        self.in_guest(f"echo '{line}' > /tmp/say.new && mv /tmp/say.new /tmp/say")

    def logs_until(self, wanted: str, *args: str) -> subprocess.CompletedProcess[str]:
        """`devcell logs logbox ARGS` once its output holds `wanted` (TCG on a busy host is
        slow to run the service and its stamp)."""
        deadline = time.monotonic() + 120
        while True:
            shown = self("logs", "logbox", *args)
            assert shown.returncode == 0, shown.stderr
            if wanted in shown.stdout or time.monotonic() > deadline:
                return shown
            time.sleep(1)


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory, vm_cache: Path) -> Iterator[Box]:
    root = tmp_path_factory.mktemp("vmlogs")
    box = Box(make_state(root / "state", vm_cache))
    manifest = root / "cell.yaml"
    manifest.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: logbox}}
        spec:
          backend: vm
          image: {IMAGE}
          network: {{mode: none}}
          resources: {{memory: 128Mi}}
          services:
            - name: web
              command: {json.dumps(["sh", "-c", WEB])}
            - name: quiet
              command: [sleep, "1000000"]
        """))
    try:
        applied = box("apply", "-f", str(manifest))
        assert applied.returncode == 0, applied.stderr
        yield box
    finally:
        kill_machines(box.state)


def test_a_services_lines_appear_escaped_and_prefixed_like_a_containers(box: Box) -> None:
    shown = box.logs_until("web started", "web")
    assert "Traceback" not in shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "[devcell] starting web" and "web started" in lines
    # The supervisor's stamp is dropped unless asked; the ESC and the forging \r are escaped.
    assert "esc \\x1b[31mred\\r forged" in lines and "\x1b" not in shown.stdout
    both = box("logs", "logbox")
    assert both.returncode == 0, both.stderr
    assert "[web] web started" in both.stdout.splitlines()
    assert "[quiet] [devcell] starting quiet" in both.stdout.splitlines()
    missing = box("logs", "logbox", "nope")
    assert missing.returncode != 0 and "has no service 'nope' (services: web, quiet)" in \
        missing.stderr


def test_tail_timestamps_and_since(box: Box) -> None:
    box.say("tail-me")
    shown = box.logs_until("tail-me", "web", "--tail", "1", "--timestamps")
    assert len(shown.stdout.splitlines()) == 1, shown.stdout
    stamp = STAMPED.match(shown.stdout)
    assert stamp is not None and shown.stdout[stamp.end():] == "tail-me\n", repr(shown.stdout)
    assert box("logs", "logbox", "web", "--tail", "0").stdout == ""
    future = box("logs", "logbox", "web", "--since", "2999-01-01T00:00:00Z")
    assert future.returncode == 0 and future.stdout == ""
    recent = box("logs", "logbox", "web", "--since", "1h")
    assert "tail-me" in recent.stdout.splitlines()


def test_follow_prints_a_line_written_after_it_started(box: Box, tmp_path: Path) -> None:
    out = tmp_path / "follow.out"
    with out.open("wb") as sink:
        follower = subprocess.Popen(
            [sys.executable, "-m", "devcell", "logs", "logbox", "web", "-f", "--tail", "0"],
            stdout=sink, stderr=subprocess.PIPE, env=box.env(), cwd=REPO,
            preexec_fn=processes.child_setup)
        try:
            time.sleep(5)  # started, its (empty) backlog printed
            box.say("said-while-following")
            deadline = time.monotonic() + 120
            while b"said-while-following" not in out.read_bytes():
                assert follower.poll() is None, follower.communicate()[1]
                assert time.monotonic() < deadline, out.read_bytes()
                time.sleep(0.5)
        finally:
            processes.end(follower)
            if follower.stderr:
                follower.stderr.close()
    assert out.read_bytes().splitlines() == [b"said-while-following"]


def test_a_hostile_log_is_refused_or_read_bounded_and_escaped(box: Box) -> None:
    log = "/var/log/devcell/quiet.log"
    box.in_guest(f"rm -f {log} && ln -s /dev/zero {log}")
    link = box("logs", "logbox", "quiet", timeout=120)
    assert link.returncode == 0 and link.stdout == "", link.stderr
    assert "skipping quiet.log in cell logbox is symbolic link; not read" in link.stderr
    box.in_guest(f"rm -f {log} && mkfifo {log}")
    fifo = box("logs", "logbox", "quiet", timeout=120)  # an open would hang the agent
    assert fifo.returncode == 0 and fifo.stdout == "" and "is fifo; not read" in fifo.stderr
    # 100 MiB without a newline (sparse: NULs), then a line with control characters.
    box.in_guest(f"rm -f {log} && truncate -s 100M {log} && "
                 f"printf 'the \\033]0;title\\007end\\n' >> {log}")
    began = time.monotonic()
    big = box("logs", "logbox", "quiet", timeout=600)
    took = time.monotonic() - began
    assert big.returncode == 0, big.stderr
    assert "quiet.log: showing its last 8 MiB of 104857618 bytes" in big.stderr
    assert big.stdout.endswith("the \\x1b]0;title\\x07end\n"), big.stdout[-200:]
    assert len(big.stdout) < 4096  # 8 MiB of NULs shown as counts, a 4 MiB piece at a time
    assert big.stdout.startswith("<4194304 NUL bytes>")
    tail = box("logs", "logbox", "quiet", "--tail", "1", timeout=600)
    assert tail.stdout == big.stdout  # its last line is all of it: the last 8 MiB of it
    assert "its last 1 lines hold more than 8 MiB" in tail.stderr
    print(f"8 MiB of a guest's log read through the agent in {took:.1f} s")


def test_a_cell_that_is_not_running_says_so(box: Box) -> None:
    follower = subprocess.Popen(
        [sys.executable, "-m", "devcell", "logs", "logbox", "-f"], stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, env=box.env(), cwd=REPO, preexec_fn=processes.child_setup)
    try:
        time.sleep(3)
        slept = box("cell", "sleep", "logbox")
        assert slept.returncode == 0, slept.stderr
        _, err = follower.communicate(timeout=120)  # the follow ends when the machine does
    finally:
        processes.end(follower)
    assert follower.returncode == 1 and b"Traceback" not in err
    assert b"cell logbox is no longer running (asleep, stopped or deleted)" in err, err
    shown = box("logs", "logbox")
    assert shown.returncode == 1 and "Traceback" not in shown.stderr
    assert "cell logbox is not running: its service logs are on the machine's disk" in \
        shown.stderr and "devcell cell start logbox" in shown.stderr
