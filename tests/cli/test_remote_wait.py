"""The waits `devcell --server` does (cli/remote_wait.py), without a server: an object whose
operation waits for approval ends the wait at once, said as `wait` says it on a state
directory (the operation, its gate, the command that approves it), never a time-out."""

from __future__ import annotations

from typing import Any

from devcell.cli import remote_wait

GATE = ("operation op_01m96tc3994y6d16er awaiting approval: the workspace changed since its "
        "last snapshot (snapshot api-before-change); deleting it loses that work")


class _Server:
    def __init__(self, reason: str, message: str = GATE) -> None:
        self.doc = {"metadata": {"name": "api", "generation": 1}, "status": {
            "phase": "Running", "observedGeneration": 1, "conditions": [
                {"type": "Ready", "status": "False", "reason": reason, "message": message}]}}

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.doc


def test_an_operation_awaiting_approval_ends_a_deletions_wait_as_on_the_state_directory(
        ) -> None:
    done = remote_wait.until(_Server("AwaitingApproval"), "Cell", "api", condition="delete",
                             want="True", deadline=float("inf"), timeout=60)
    assert done.gated and done.failed == (
        f"{GATE}; approve it with `devcell op resume op_01m96tc3994y6d16er --input confirm=api`")


def test_another_reason_or_message_is_waited_out() -> None:
    for server in (_Server("Reconciling"), _Server("AwaitingApproval", "no operation named")):
        done = remote_wait.until(server, "Cell", "api", condition="delete", want="True",
                                 deadline=0, timeout=0)
        assert not done.gated and done.failed == "timed out after 0s: phase Running"


def test_an_expired_snapshot_ends_the_wait_at_once() -> None:
    """An apply that sets a ttl already past: the snapshot is Expired (and deleted) without
    observing the new generation; the wait ends saying so, not after --timeout with "timed
    out" (attack46 F4)."""
    server = _Server("Expired", "its ttl of 1s ran out at 2026-12-07T02:46:50.988Z")
    server.doc["metadata"]["generation"] = 2
    server.doc["status"]["phase"] = "Expired"
    done = remote_wait.until(server, "Snapshot", "h21", condition="Ready", want="True",
                             deadline=float("inf"), timeout=300)
    assert not done.gated and done.failed == (
        "it expired (its ttl of 1s ran out at 2026-12-07T02:46:50.988Z)")
