"""A checkpoint hook past its time limit is killed with what it started (a hostile or stuck
hook must not hold `snapshot create` forever), and the cell resumes."""

from __future__ import annotations

import io
import time

import pytest

from devcell.backends.container.backend import ContainerBackend
from devcell.errors import BackendError
from tests.backends.container.support import cell, up

STUCK = "sleep 1000 & sleep 1001 & trap '' TERM; sleep 1002; echo never"


def _sleepers(backend: ContainerBackend, ref: object) -> list[str]:
    out = io.BytesIO()
    backend.exec(ref, ["ps", "-o", "args"], stdout=out, stderr=out)  # type: ignore[arg-type]
    return [line for line in out.getvalue().decode().splitlines() if "sleep 10" in line]


def test_a_stuck_pre_hook_is_killed_with_its_children(backend: ContainerBackend) -> None:
    ref = cell(hooks={"preCheckpoint": [["sh", "-c", STUCK]], "timeoutSeconds": 2})
    up(backend, ref)
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"did not finish within 2 s .*timeoutSeconds"):
        backend.quiesce(ref)
    assert time.monotonic() - started < 20
    assert _sleepers(backend, ref) == []  # the hook and both background children are gone
    backend.resume(ref)
    observed = backend.observe(ref)
    assert observed.running and not observed.frozen


def test_a_hook_within_its_limit_runs_to_the_end(backend: ContainerBackend) -> None:
    ref = cell(hooks={"postCheckpoint": [["sh", "-c", "sleep 1; echo done >> /workspace/h"]],
                      "timeoutSeconds": 30})
    up(backend, ref)
    backend.quiesce(ref)
    backend.checkpoint(ref, "snap_hook_in_time")
    assert backend.resume(ref)["hooks"] == 1
    workspace = backend.layout.workspace(ref.volume_id or "")
    assert (workspace / "h").read_text() == "done\n"


def test_a_flooding_pre_hook_past_its_limit_is_said_as_its_time_limit(
        backend: ContainerBackend) -> None:
    """Issue 31, item 12, on the real engine: a hook that floods its output and outlives its
    limit is killed and said so each time (the timer once closed the reader under it)."""
    flood = "while :; do echo " + "y" * 200 + "; done"
    ref = cell(hooks={"preCheckpoint": [["sh", "-c", flood]], "timeoutSeconds": 1})
    up(backend, ref)
    for _ in range(3):
        with pytest.raises(BackendError, match=r"did not finish within 1 s"):
            backend.quiesce(ref)
        backend.resume(ref)
    observed = backend.observe(ref)
    assert observed.running and not observed.frozen
