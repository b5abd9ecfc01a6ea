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


@pytest.mark.parametrize(("status", "met"), [
    ("True", True), ("true", True), ("False", False), ("Unknown", False)])
def test_a_ready_cell_meets_only_the_status_asked_for(cli: Cli, status: str, met: bool) -> None:
    """kubectl compares the STATUS of --for=condition=TYPE=STATUS (case aside): a Ready cell
    meets Ready=True at once and never Ready=False or Ready=Unknown (the wait times out)."""
    assert cli("apply", "-f", str(EXAMPLES / "api.yaml")).returncode == 0
    done = cli("wait", "cell", "api", f"--for=condition=Ready={status}", "--timeout", "1s")
    if met:
        assert (done.returncode, done.stdout) == (0, "cell/api condition met (Ready=True)\n")
    else:
        assert done.returncode == 1 and done.stdout == "", done
        assert done.stderr.startswith("error: cell/api: timed out after 1s: Ready=True"), done


def test_a_failed_cell_meets_ready_false(cli: Cli, state_dir: Path) -> None:
    failed = cli("apply", "-f", str(EXAMPLES / "api.yaml"), env={"DEVCELL_FAKE_FAIL": "create@api:perm"})
    assert failed.returncode == 1, failed
    done = cli("wait", "cell", "api", "--for=condition=Ready=False", "--timeout", "5s")
    assert (done.returncode, done.stdout) == (0, "cell/api condition met (Ready=False)\n"), done
    true = cli("wait", "cell", "api", "--for=condition=Ready=True", "--timeout", "1s")
    assert true.returncode == 1 and "Ready=False" in true.stderr, true


@pytest.mark.parametrize("status", ["Maybe", "", "1"])
def test_an_invalid_status_is_refused_when_parsing(cli: Cli, status: str) -> None:
    bad = cli("wait", "cell", "api", f"--for=condition=Ready={status}", "--timeout", "1s")
    assert bad.returncode == 2 and bad.stdout == "", bad
    assert bad.stderr.splitlines()[-1] == (f"error: argument --for: 'condition=Ready={status}': a "
                                           "condition's status is True, False or Unknown "
                                           f"(got {status!r})"), bad
