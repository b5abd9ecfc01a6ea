"""The helpers that keep a test from leaving processes behind (tests/processes.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests import processes


def test_leftovers_finds_kills_and_reaps_a_forgotten_child() -> None:
    before = set(processes.live_children())
    forgotten = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    left = processes.leftovers(before, grace_s=0.2)
    assert list(left) == [forgotten.pid] and "time.sleep(60)" in left[forgotten.pid]
    assert forgotten.pid not in processes.live_children()
    forgotten.wait(5)  # reaped already: Popen finds no child, and does not hang
    assert processes.leftovers(before, grace_s=0) == {}


def test_forked_kills_its_child_when_the_block_fails() -> None:
    try:
        with processes.forked(lambda: time.sleep(60)) as child:
            raise RuntimeError("a failed check")
    except RuntimeError:
        pass
    assert child.status is not None and os.WTERMSIG(child.status) == signal.SIGKILL
    assert child.pid not in processes.live_children()


def test_a_child_gets_sigint_at_its_default_though_the_parent_ignores_it() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for setup in (None, processes.child_setup):
            proc = subprocess.Popen(
                [sys.executable, "-c", "import signal, sys; "
                 "sys.stdout.write(str(signal.getsignal(signal.SIGINT) is signal.SIG_IGN))"],
                stdout=subprocess.PIPE, text=True, preexec_fn=setup)
            out, _ = proc.communicate(timeout=30)
            assert out == ("True" if setup is None else "False")
    finally:
        signal.signal(signal.SIGINT, previous)
