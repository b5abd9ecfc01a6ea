"""What the container and vm SSH tests share: a cell reached with OpenSSH's client through the
config `devcell ssh-config` wrote, an image that adds the host's rsync (with its libraries) to
DevCell's busybox base, and an interactive shell driven on a real terminal under tmux."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO


class Cell:
    """One cell of a test module, its state directory and the ssh config written for it."""

    def __init__(self, state: Path, config: Path, work: Path, *, timeout: float) -> None:
        self.state = state
        self.config = config
        self.work = work
        self.timeout = timeout

    def devcell(self, *args: str, input: str | None = None,
                timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "devcell", *args], cwd=REPO, input=input,
                              capture_output=True, text=True, timeout=timeout or self.timeout,
                              env=dict(os.environ, DEVCELL_HOME=str(self.state)))

    def ssh(self, *args: str, input: bytes | None = None, timeout: float | None = None,
            program: str = "ssh") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([program, "-F", str(self.config), *args], input=input,
                              capture_output=True, timeout=timeout or self.timeout / 2,
                              cwd=self.work)


def serve_cell(made: Cell, manifest: Path, name: str, *, timeout: float) -> Cell:
    """`made` with its cell applied from `manifest` and `devcell ssh-config NAME` written."""
    made.work.mkdir()
    done = made.devcell("apply", "-f", str(manifest), timeout=timeout)
    assert done.returncode == 0, done.stderr
    config = made.devcell("ssh-config", name)
    assert config.returncode == 0, config.stderr
    made.config.write_text(config.stdout)
    return made


def rsync_context(context: Path) -> Path:
    """A build context whose image is DevCell's busybox base plus the host's rsync."""
    if shutil.which("rsync") is None:
        pytest.fail("rsync is missing: scripts/test installs it")
    root = context / "root"
    out = subprocess.run(["ldd", "/usr/bin/rsync"], capture_output=True, text=True,
                         check=True).stdout
    libraries = {part for line in out.splitlines() for part in line.split()
                 if part.startswith("/")}
    for path in ["/usr/bin/rsync", *sorted(libraries)]:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(path), target)
    (context / "Dockerfile").write_text("FROM devcell/busybox:latest\nCOPY root/ /\n")
    return context


def interactive_shell(cell: Cell, host: str, *, seconds: float) -> None:
    """`ssh HOST` on a 120x40 tmux window: the prompt in the workspace, the terminal's size
    and a resize, Ctrl-C ending a command but not the session, and `exit 5` as ssh's status."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is missing: scripts/test installs it")
    session = f"devcell-{host.split('.')[0]}-{os.getpid()}"
    marker = cell.work / "exited"
    command = f"ssh -F {cell.config} {host}; echo $? > {marker}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40",
                    command], check=True)
    try:
        def screen() -> str:
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                  capture_output=True, text=True).stdout

        def wait_for(text: str) -> str:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                shown = screen()
                if text in shown:
                    return shown
                time.sleep(0.2)
            raise AssertionError(f"{text!r} never shown:\n{screen()}")

        def keys(*words: str) -> None:
            subprocess.run(["tmux", "send-keys", "-t", session, *words], check=True)

        wait_for("/workspace #")
        keys("stty size; tty; echo TERM=$TERM; echo END-$((1+1))", "Enter")
        shown = wait_for("END-2")  # printed last: what comes before it is on the screen
        assert "40 120" in shown and "/dev/pts/" in shown and "TERM=tmux" in shown, shown
        subprocess.run(["tmux", "resize-window", "-t", session, "-x", "100", "-y", "30"],
                       check=True)
        time.sleep(1)
        keys("stty size", "Enter")
        wait_for("30 100")
        keys("sleep 300", "Enter")
        time.sleep(1)
        keys("C-c")
        keys("echo after-$((20+1))", "Enter")
        wait_for("after-21")  # the interrupt ended sleep, not the session
        keys("exit 5", "Enter")
        deadline = time.monotonic() + seconds
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.read_text().strip() == "5"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
