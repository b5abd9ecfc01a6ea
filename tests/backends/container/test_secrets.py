"""A secret env value reaches the services and nothing else DevCell writes or configures."""

from __future__ import annotations

import hashlib
import io
import json
import secrets
from pathlib import Path
from typing import Any

from loguru import logger

from devcell.backends.container.backend import ContainerBackend
from tests.backends.container.support import cell, up, wait_for


def test_secret_canary_stays_out_of_inspect_labels_and_logs(
        backend: ContainerBackend, docker_client: Any, state: Path) -> None:
    canary = f"canary-{secrets.token_hex(8)}"
    ref = cell(env=[{"name": "PLAIN", "value": "visible"},
                    {"name": "TOKEN", "value": canary, "secret": True}],
               services=[{"name": "svc", "command": [
                   # written aside and renamed: the test must never read a half-written file
                   "sh", "-c", 'printf %s "$TOKEN" | md5sum > /workspace/.token.tmp && '
                               'mv /workspace/.token.tmp /workspace/token.md5; '
                               'echo service up; sleep 600']}],
               hooks={"preCheckpoint": [["sh", "-c", "true"]]})
    captured = io.StringIO()
    logger.enable("devcell")
    sink = logger.add(captured, level="DEBUG", format="{message} {extra}",
                      diagnose=False)
    try:
        up(backend, ref)
        workspace = backend.layout.workspace(ref.volume_id or "")
        digest = wait_for(lambda: (workspace / "token.md5").exists()
                          and (workspace / "token.md5").read_text().split()[0])
        assert digest == hashlib.md5(canary.encode()).hexdigest()  # the service got it
        out = io.BytesIO()
        assert backend.exec(ref, ["sh", "-c", 'test "$TOKEN" = "$1"', "sh", canary],
                            stdout=out, stderr=out) == 0  # and so does devcell exec
        backend.quiesce(ref)
        backend.checkpoint(ref, "snap_secret")
        backend.resume(ref)
        backend.stop(ref)
        backend.start(ref)
    finally:
        logger.remove(sink)
        logger.disable("devcell")
    inspected = json.dumps(docker_client.api.inspect_container(backend.container_name(ref)))
    assert canary not in inspected
    assert "PLAIN=visible" in inspected
    assert canary not in docker_client.api.logs(backend.container_name(ref)).decode()
    assert canary not in captured.getvalue()
    run_dir = backend.layout.run_dir(ref.id)
    assert canary not in (run_dir / "supervisor.sh").read_text()
    assert (run_dir / "secrets.env").stat().st_mode & 0o077 == 0
    for log in backend.log_paths(ref).values():
        assert canary not in log.read_text()
    backend.delete(ref)
    assert not (run_dir / "secrets.env").exists()  # removed with the container


def test_a_failing_hook_that_prints_a_secret_does_not_record_it(backend: ContainerBackend) -> None:
    import pytest

    from devcell.errors import BackendError

    canary = f"canary-{secrets.token_hex(8)}"
    ref = cell(env=[{"name": "TOKEN", "value": canary, "secret": True}],
               hooks={"preCheckpoint": [["sh", "-c", 'echo "token is $TOKEN"; exit 1']]})
    up(backend, ref)
    with pytest.raises(BackendError) as failure:
        backend.quiesce(ref)
    assert "token is <redacted>" in str(failure.value) and canary not in str(failure.value)
    backend.resume(ref)
