"""The README's main job, `./scripts/demo`, run twice as a new user would: the day in
miniature works on real cells (a git-sourced workspace served on localhost, a snapshot, a
fork reached over ssh, sleep and start; a vm cell where QEMU is present), and the second run
finds every object unchanged. About 20 s for both runs here (the vm cell's boot and true
sleep included where QEMU is present)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.backends.engine import remove_containers, require_engine
from tests.backends.vm_machines import kill_machines
from tests.conftest import REPO


def test_the_demo_runs_a_day_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    require_engine()
    state = tmp_path / "demo"
    env = dict(os.environ, DEVCELL_HOME=str(state))
    try:
        first = subprocess.run(["./scripts/demo"], cwd=REPO, env=env, capture_output=True,
                               text=True, timeout=900)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        out = first.stdout
        assert "cell/web created" in out and "cell/web-fork created" in out
        assert "snapshot/web-day-start created" in out
        assert re.search(r"GET http://127\.0\.0\.1:\d+/index\.html -> <h1>hello from the demo "
                         r"project</h1>", out), out
        if shutil.which("ssh"):
            assert "web-fork\n# demo project\n" in out, out  # ssh into the fork
        assert out.count("# demo project") >= 2  # the fork's files after sleep and start
        second = subprocess.run(["./scripts/demo"], cwd=REPO, env=env, capture_output=True,
                                text=True, timeout=900)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        applied, in_apply = [], False
        for line in second.stdout.splitlines():
            in_apply = line.startswith("$ devcell apply") or (in_apply and line != "")
            if in_apply and re.fullmatch(r"(cell|snapshot)/\S+ \S+", line):
                applied.append(line)
        assert applied and all(line.endswith(" unchanged") for line in applied), applied
    finally:
        kill_machines(state)
        remove_containers(state)
