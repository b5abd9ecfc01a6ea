"""cli/remote_cells.py's printing of an action's answer, with a stand-in client: what did
not settle said as `cell sleep` says it on a state directory with a daemon running (the
daemon named, the command's own --timeout in a timeout's words), and its exit code. The
same bytes as direct use are checked against the real server in
tests/server/test_cli_remote.py."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from devcell.cli import remote_cells


class Client:
    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer, self.asked = answer, []

    def action(self, cell: str, verb: str, body: Any, *, wait: bool, timeout: int
               ) -> dict[str, Any]:
        self.asked.append((cell, verb, body, wait, timeout))
        return self.answer

    def get(self, resource: str, name: str) -> dict[str, Any]:
        raise AssertionError("a failed sleep says nothing of what it kept")


def test_what_did_not_settle_is_said_with_the_daemon_and_the_commands_timeout(
        capsys: pytest.CaptureFixture[str]) -> None:
    answer = {"changes": [{"kind": "Cell", "name": "api", "id": "cell_1",
                           "outcome": "configured"}],
              "missing": [], "expired": ["old"], "ok": False,
              "reconciledBy": "pid 7 on host, since T",
              "results": [{"kind": "Cell", "name": "api", "status": "waiting",
                           "message": "timed out after 1s: phase Stopping"}]}
    client = Client(answer)
    args = argparse.Namespace(remote=client, cell="api", timeout=0.5)
    assert remote_cells.run_cell_sleep(args) == 1
    out, err = capsys.readouterr()
    assert out == "cell/api configured\nsnapshot/old expired\n"
    assert err == ("error: cell/api: timed out after 0.5s: phase Stopping (reconciled by the "
                   "controller, pid 7 on host, since T)\n")
    assert client.asked == [("api", "sleep", None, True, 1)]


def test_fork_asks_for_what_its_flags_say() -> None:
    client = Client({"changes": [], "missing": [], "results": [], "ok": True})
    args = argparse.Namespace(remote=client, cell="api", timeout=7200.0, count=None,
                              snapshot="s", name="f", port=[(8080, 18080)], no_ports=False)
    assert remote_cells.run_cell_fork(args) == 0
    assert client.asked == [("api", "fork", {"name": "f", "snapshot": "s", "exclusive": False,
                                             "ports": {"8080": 18080}}, True, 3600)]
