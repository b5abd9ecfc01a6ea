"""Host commands (spec.hooks.hostInitialize): said before they run, output shown bounded and
escaped, a failure named with its output's tail, a command past its time limit killed with
everything it started, never a shell unless the argv names one."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from devcell.backends.host import commands


def _run(argvs: list[list[str]], cwd: Path, timeout: float = 10) -> tuple[str, commands.Ran]:
    said: list[str] = []
    ran = commands.run_all(argvs, cwd=str(cwd), timeout=timeout, cell="c", say=said.append)
    return "".join(said), ran


def test_each_is_said_then_run_as_written(tmp_path: Path) -> None:
    shown, ran = _run([["echo", "$HOME;", "\x1b[2J"], ["touch", "made"]], tmp_path)
    assert ran.commands == 2 and (tmp_path / "made").exists()
    assert "running on the host (hooks.hostInitialize, in " in shown
    assert "echo '$HOME;' '\\x1b[2J'" in shown  # no shell: $HOME stays as written
    assert "$HOME; \\x1b[2J\n" in shown and "\x1b" not in shown


def test_output_is_bounded(tmp_path: Path) -> None:
    shown, _ = _run([["sh", "-c", "head -c 200000 /dev/zero | tr '\\0' q"]], tmp_path)
    assert shown.split("\n", 1)[1].count("q") == commands.MAX_SHOWN and "[output cut at 64 KiB]" in shown


def test_a_failure_names_the_command_and_its_output(tmp_path: Path) -> None:
    with pytest.raises(commands.HostCommandFailed, match=r"hooks.hostInitialize sh -c "
                       r"'echo oops; exit 4' of cell c exited with status 4: oops"):
        _run([["sh", "-c", "echo oops; exit 4"], ["touch", "never"]], tmp_path)
    assert not (tmp_path / "never").exists()
    with pytest.raises(commands.HostCommandFailed, match="cannot run it"):
        _run([["/nonexistent/tool"]], tmp_path)


def test_past_its_time_limit_it_is_killed_with_its_children(tmp_path: Path) -> None:
    began = time.monotonic()
    with pytest.raises(commands.HostCommandFailed, match="ran past its time limit of 0.5s"):
        _run([["sh", "-c", "(sleep 30; touch late) & sleep 30"]], tmp_path, timeout=0.5)
    assert time.monotonic() - began < 5
    time.sleep(0.2)
    assert not (tmp_path / "late").exists()


def test_what_it_leaves_running_is_killed_when_it_ends(tmp_path: Path) -> None:
    """A command that starts a background process with its output elsewhere ends at once;
    the process it left must not run on past the hook, unbounded."""
    _run([["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $! > left"]], tmp_path)
    pid = int((tmp_path / "left").read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"pid {pid} still runs after the host command ended")
