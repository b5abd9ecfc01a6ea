"""`devcell exec -i` and `-t`, run as a user runs them: piped input, and a pseudo-terminal.

Against the real engine (no mocks). The terminal tests give devcell a pseudo-terminal as its
standard streams, type into it through the leader side, and check afterwards that devcell left
the terminal's mode as it found it.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.engine import IMAGE
from tests.conftest import REPO, Cli

CANARY = "canary-exec-i-5d21e8"


@pytest.fixture
def cell(engine: None, cli: Cli, tmp_path: Path, state: Path) -> str:
    manifest = tmp_path / "cell.yaml"
    manifest.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: term}}
        spec:
          backend: container
          image: {IMAGE}
          network: {{mode: none}}
          env:
            - {{name: TOKEN, value: {CANARY}, secret: true}}
          services:
            - name: idle
              command: [sleep, "600"]
        """))
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    return "term"


# -- -i: piped standard input -------------------------------------------------------------

def test_piped_input_reaches_the_command_and_its_end_closes_it(cli: Cli, cell: str) -> None:
    result = cli("exec", "-i", cell, "--", "cat", input="hi\n")
    assert (result.returncode, result.stdout, result.stderr) == (0, "hi\n", "")
    big = "x" * 3_000_000  # more than any buffer on the way: the copy must not stall
    counted = cli("exec", "--stdin", cell, "--", "wc", "-c", input=big)
    assert counted.returncode == 0 and counted.stdout.strip() == str(len(big))


def test_exit_status_and_environment_with_input(cli: Cli, cell: str) -> None:
    script = 'read line; test "$line" = hello && test "$TOKEN" = "$1" && echo seen >&2; exit 7'
    result = cli("exec", "-i", cell, "--", "sh", "-c", script, "sh", CANARY, input="hello\n")
    assert result.returncode == 7
    assert result.stderr == "seen\n" and result.stdout == ""


def test_without_i_the_command_reads_no_input(cli: Cli, cell: str) -> None:
    result = cli("exec", cell, "--", "cat", input="not forwarded\n")
    assert (result.returncode, result.stdout) == (0, "")


def test_the_command_may_end_before_its_input_does(cli: Cli, cell: str) -> None:
    result = cli("exec", "-i", cell, "--", "head", "-n", "1", input="first\n" * 200_000)
    assert (result.returncode, result.stdout) == (0, "first\n")


# -- usage errors (no engine needed: refused before the cell is looked up) ---------------------

def test_tty_without_a_terminal_is_a_usage_error(cli: Cli) -> None:
    for flags in (["-t"], ["-it"], ["--stdin", "--tty"]):
        result = cli("exec", *flags, "anything", "--", "sh", input="")
        assert result.returncode == 2, (flags, result.stderr)
        assert "the input device is not a terminal" in result.stderr
        assert "Traceback" not in result.stderr


def test_options_after_the_cell_name_are_a_usage_error(cli: Cli) -> None:
    result = cli("exec", "box", "-i", "--", "cat", input="")
    assert result.returncode == 2
    assert "go before the cell name: devcell exec -i box -- CMD" in result.stderr
    assert "Traceback" not in result.stderr


# -- -t: a pseudo-terminal -----------------------------------------------------------------

class Terminal:
    """devcell with a pseudo-terminal as stdin, stdout and stderr; the test holds the leader.

    The follower stays open here too, so its mode can be read while and after devcell runs.
    """

    def __init__(self, argv: list[str], env: dict[str, str], *, rows: int = 24,
                 columns: int = 80) -> None:
        self.leader, self.follower = pty.openpty()
        self.resize(rows, columns)
        self.mode = termios.tcgetattr(self.follower)
        self.proc = subprocess.Popen(argv, stdin=self.follower, stdout=self.follower,
                                     stderr=self.follower, env=env, cwd=REPO,
                                     start_new_session=True)
        self.output = b""

    def resize(self, rows: int, columns: int) -> None:
        fcntl.ioctl(self.follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def _pump(self, wait: float) -> None:
        ready, _, _ = select.select([self.leader], [], [], wait)
        if ready:
            self.output += os.read(self.leader, 65536)

    def expect(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.output:
            assert time.monotonic() < deadline, f"no {text!r} in {self.output!r}"
            assert self.proc.poll() is None or self._drained(), self.output
            self._pump(0.1)

    def _drained(self) -> bool:
        ready, _, _ = select.select([self.leader], [], [], 0)
        return bool(ready)

    def type(self, data: bytes) -> None:
        os.write(self.leader, data)

    def wait(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, self.output
            self._pump(0.1)
        while self._drained():
            self._pump(0)
        return self.proc.returncode

    def is_raw(self) -> bool:
        return not termios.tcgetattr(self.follower)[3] & termios.ICANON

    def restored(self) -> bool:
        return termios.tcgetattr(self.follower) == self.mode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self.leader)
        os.close(self.follower)


@pytest.fixture
def terminal(state_dir: Path) -> Iterator[type[Terminal]]:
    started: list[Terminal] = []
    env = dict(os.environ, DEVCELL_HOME=str(state_dir))

    class Started(Terminal):
        def __init__(self, *args: str, **size: int) -> None:
            super().__init__([sys.executable, "-m", "devcell", *args], env, **size)
            started.append(self)

    yield Started
    for one in started:
        one.close()


WAIT_FOR_SIZE = ('for i in $(seq 100); do s=$(stty size 2>/dev/null); '
                 'case $s in ""|"0 0") sleep 0.05 ;; *) break ;; esac; done; echo "size=$s"')
"""The size is set just after the command starts: a script waits for it (5 s at most)."""


def test_tty_gives_the_command_a_terminal_of_the_callers_size(
        cell: str, terminal: type[Terminal]) -> None:
    script = ('tty; test -t 0 && test -t 1 && echo on-a-terminal; test "$TOKEN" = "$1" && '
              f'echo secret-applies; {WAIT_FOR_SIZE}; exit 5')
    session = terminal("exec", "-t", cell, "--", "sh", "-c", script, "sh", CANARY,
                       rows=37, columns=101)
    assert session.wait() == 5
    shown = session.output.decode(errors="replace")
    assert "/dev/pts/" in shown and "on-a-terminal" in shown and "secret-applies" in shown
    assert "size=37 101" in shown
    assert session.restored()


def test_keystrokes_reach_the_command_in_raw_mode_and_the_mode_is_restored(
        cell: str, terminal: type[Terminal]) -> None:
    session = terminal("exec", "-it", cell, "--", "sh", "-c",
                       'echo ready; read line; echo "got:$line"; '
                       'trap "echo trapped; exit 3" INT; echo waiting; '
                       "while :; do sleep 0.1; done")
    session.expect("ready")
    assert session.is_raw()  # devcell handed the keys over: no line editing, no local Ctrl-C
    session.type(b"hello\r")
    session.expect("got:hello")
    session.expect("waiting")
    session.type(b"\x03")  # Ctrl-C: an interrupt for the command, not for devcell
    assert session.wait() == 3
    assert b"trapped" in session.output
    assert session.restored()


def test_a_resized_window_reaches_the_command(cell: str, terminal: type[Terminal]) -> None:
    session = terminal("exec", "-it", cell, "--", "sh", "-c",
                       f'{WAIT_FOR_SIZE}; while read x; do echo "now=$(stty size)"; done',
                       rows=20, columns=70)
    session.expect("size=20 70")
    session.resize(50, 132)
    session.proc.send_signal(signal.SIGWINCH)  # the kernel's signal to a foreground process
    deadline = time.monotonic() + 30
    while b"now=50 132" not in session.output:
        assert time.monotonic() < deadline, session.output
        session.type(b"\r")
        time.sleep(0.2)
        session._pump(0.1)
    session.type(b"\x04")  # Ctrl-D: end of input on the cell's terminal
    assert session.wait() == 0
    assert session.restored()


def test_sigterm_while_attached_still_restores_the_terminal(
        cell: str, terminal: type[Terminal]) -> None:
    session = terminal("exec", "-it", cell, "--", "sh", "-c", "echo ready; sleep 30")
    session.expect("ready")
    assert session.is_raw()
    session.proc.terminate()
    assert session.wait() == 128 + signal.SIGTERM
    assert session.restored()
    assert b"Traceback" not in session.output


def test_a_failure_while_attached_restores_the_terminal_without_a_traceback(
        cell: str, terminal: type[Terminal]) -> None:
    session = terminal("exec", "-it", cell, "--", "/no/such/program")
    assert session.wait() not in (0, None)
    assert b"Traceback" not in session.output
    assert session.restored()


def test_exec_to_a_sleeping_cell_wakes_it_says_so_and_restores_the_terminal(
        cli: Cli, cell: str, terminal: type[Terminal]) -> None:
    assert cli("cell", "sleep", cell).returncode == 0
    session = terminal("exec", "-it", cell, "--", "sh")
    session.expect("woken")
    session.expect("#")
    session.type(b"exit 3\n")
    assert session.wait() == 3
    assert b"asleep; waking it for exec" in session.output
    assert b"Traceback" not in session.output
    assert session.restored()
