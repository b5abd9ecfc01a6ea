"""`devcell exec` and `logs` on a container cell stopped behind DevCell's back: the command
warns that the runtime drifted and records what it saw (Ready False, RuntimeDrifted), so
`get` tells the truth and `cell start`, which the warning suggests, repairs it. (The fake
backend runs no command, so these verbs refuse a fake cell before observing anything.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from devcell.backends.host.ids import state_hash
from tests.backends.container.support import box_manifest
from tests.conftest import Cli


def _status(cli: Cli) -> dict[str, Any]:
    out = cli("get", "cell", "box", "-o", "json")
    assert out.returncode == 0, out.stderr
    status: dict[str, Any] = json.loads(out.stdout)["status"]
    return status


@pytest.mark.parametrize("verb", [["exec", "box", "--", "true"], ["logs", "box"]])
def test_a_verb_on_a_cell_stopped_behind_its_back_records_the_drift(
        cli: Cli, tmp_path: Any, state_dir: Any, docker_client: Any, verb: list[str]) -> None:
    applied = cli("apply", "-f", str(box_manifest(tmp_path)), timeout=300)
    assert applied.returncode == 0, applied.stderr
    try:
        [found] = docker_client.api.containers(filters={"label": [
            "dev.devcell.managed=true", f"dev.devcell.state-dir={state_hash(state_dir)}"]})
        docker_client.api.stop(found["Id"], timeout=1)
        out = cli(*verb)
        assert "Traceback" not in out.stderr
        assert "warning: cell box: its runtime" in out.stderr, out.stderr
        assert "`devcell cell start box` repairs it" in out.stderr
        status = _status(cli)
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "RuntimeDrifted")
        started = cli("cell", "start", "box", timeout=300)
        assert started.returncode == 0 and started.stdout.strip() == "cell/box repaired", \
            started.stdout + started.stderr
        assert _status(cli)["phase"] == "Running"
    finally:
        cli("delete", "cell", "box", "--approve", timeout=300)
