"""`devcell wait` on an object not recorded yet: it waits for it within the timeout (a GitOps
user saves a file and runs `wait` before the daemon has recorded it), and --for=create."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import processes
from tests.conftest import EXAMPLES, REPO, Cli


def _start_wait(state_dir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "devcell", "wait", *args], cwd=REPO,
                            env=dict(os.environ, DEVCELL_HOME=str(state_dir)), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=processes.child_setup)


@pytest.mark.parametrize("condition", ["create", "condition=Ready"])
def test_wait_started_before_the_object_exists(cli: Cli, state_dir: Path, condition: str) -> None:
    waiter = _start_wait(state_dir, "cell", "api", f"--for={condition}", "--timeout", "60s")
    try:
        time.sleep(1.0)  # no state directory yet, then no object: the wait keeps waiting
        assert waiter.poll() is None, waiter.communicate()
        assert cli("apply", "-f", str(EXAMPLES / "api.yaml")).returncode == 0
        out, err = waiter.communicate(timeout=60)
    finally:
        processes.end(waiter)
    assert waiter.returncode == 0, err
    expected = "created" if condition == "create" else "condition met (Ready=True)"
    assert out == f"cell/api {expected}\n"


def test_an_object_never_created_is_not_found_after_the_timeout(cli: Cli) -> None:
    t0 = time.monotonic()
    missing = cli("wait", "cell", "nope", "--for=create", "--timeout", "1s")
    assert time.monotonic() - t0 >= 1.0
    assert missing.returncode == 1
    assert missing.stderr == ('error: cell "nope" not found (waited 1s for it to be created)\n')


def test_for_create_of_an_existing_object_and_for_delete_of_a_missing_one(cli: Cli) -> None:
    assert cli("apply", "-f", str(EXAMPLES / "api.yaml")).returncode == 0
    assert cli("wait", "cell", "api", "--for=create").stdout == "cell/api created\n"
    assert cli("wait", "cell", "nope", "--for=delete").stdout == "cell/nope deleted\n"
    bad = cli("wait", "cell", "api", "--for=exists")
    assert bad.returncode == 2 and "condition=TYPE[=STATUS], create or delete" in bad.stderr
