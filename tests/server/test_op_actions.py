"""`op resume` and `op cancel` through the API (server/op_actions.py, cli/remote_ops.py)
against the session's real server (fake backend): a delete stopped at its approval gate (the
cell's workspace changed since its last snapshot) is answered wrongly, then rightly, through
`devcell --server ... op resume`, and the cell goes; another's is cancelled and kept. Who may:
a developer only for their own cells' operations, a viewer never. Bad bodies are problems.

Cost: ~3-5 s (two cells on the fake backend, the daemon's deletes).
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from devcell import Client, errors
from devcell.cli.main import main
from tests.server.conftest import Api
from tests.server.test_app import assert_problem, cell, wait_for


def gated(api: Api, tmp_path: Path, owner: str | None = None) -> tuple[str, str]:
    """A running cell (its owner's, when given) whose delete waits at its approval gate:
    (the cell, the suspended operation's id)."""
    name = f"gate-{uuid.uuid4().hex[:6]}"
    text = cell(name, team="gate")
    if owner is not None:
        text = text.replace(f"metadata: {{name: {name},", f"metadata: {{name: {name}, "
                            f"owner: {owner},")
    (tmp_path / f"{name}.yaml").write_text(text)
    done = api.cli("apply", "-f", str(tmp_path / f"{name}.yaml"))
    assert done.returncode == 0, done.stderr
    wait_for(api, f"/api/v1/cells/{name}", lambda r: r.json()["status"]["phase"] == "Running")
    conn = sqlite3.connect(api.state / "backends" / "fake.db")
    try:  # someone edits the workspace: its delete must ask first
        conn.execute("UPDATE volumes SET writes = writes + 1 WHERE cell_name = ?", (name,))
        conn.commit()
    finally:
        conn.close()
    assert api.client.delete(f"/api/v1/cells/{name}").status_code == 200

    def suspended(_: object) -> bool:
        ops = api.client.get("/api/v1/operations").json()["items"]
        return any(o["object_name"] == name and o["status"] == "Suspended" for o in ops)

    wait_for(api, f"/api/v1/cells/{name}", suspended)
    ops = api.client.get("/api/v1/operations").json()["items"]
    op = next(o for o in ops if o["object_name"] == name and o["status"] == "Suspended")
    assert op["reason"] == "AwaitingApproval"
    return name, str(op["id"])


def _remote(api: Api, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["--server", f"unix:{api.socket}", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_gated_delete_is_approved_through_the_server(
        api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name, op = gated(api, tmp_path)
    code, out, err = _remote(api, capsys, "op", "resume", op, "--input", "confirm=wrong")
    assert code == 1 and "stays suspended" in err and out == "", (code, out, err)
    assert api.client.get(f"/api/v1/operations/{op}").json()["status"] == "Suspended"
    code, out, err = _remote(api, capsys, "op", "resume", op, "--input", f"confirm={name}",
                             "--timeout", "60s")
    assert (code, out) == (0, f"operation/{op} approved\n"), err
    assert api.client.get(f"/api/v1/operations/{op}").json()["status"] == "Succeeded"
    assert api.client.get(f"/api/v1/cells/{name}").status_code == 404
    code, _, err = _remote(api, capsys, "op", "resume", op)
    assert code == 2 and "is Succeeded, not suspended" in err, err  # a usage error, as direct
    code, _, err = _remote(api, capsys, "op", "cancel", "op_nope")
    assert code == 1 and 'operation "op_nope" not found' in err, err


def test_a_cancel_keeps_the_cell(api: Api, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    name, op = gated(api, tmp_path)
    code, out, err = _remote(api, capsys, "op", "cancel", op)
    assert (code, out) == (0, f"operation/{op} cancelled\n"), err
    doc = api.client.get(f"/api/v1/operations/{op}").json()
    assert (doc["status"], doc["reason"]) == ("Failed", "Cancelled")
    wait_for(api, f"/api/v1/cells/{name}",
             lambda r: "deletionTimestamp" not in r.json()["metadata"])


def test_only_the_cells_owner_or_an_admin_may_answer_its_gate(api: Api, tmp_path: Path) -> None:
    _, op = gated(api, tmp_path, owner="gate-owner")
    viewer = api.token(f"gate-viewer-{uuid.uuid4().hex[:4]}", "viewer")
    other = api.token(f"gate-other-{uuid.uuid4().hex[:4]}", "developer")
    for token, rule in ((viewer, "viewer-read-only"), (other, "developer-not-own")):
        with Client(api.url, token=token, ca=str(api.certificate)) as dc:
            for act in (lambda: dc.resume_operation(op, {"confirm": "x"}),
                        lambda: dc.cancel_operation(op)):
                with pytest.raises(errors.Forbidden) as refused:
                    act()
                assert refused.value.rule == rule
    assert api.client.get(f"/api/v1/operations/{op}").json()["status"] == "Suspended"
    owner = api.token("gate-owner", "developer")
    with Client(api.url, token=owner, ca=str(api.certificate)) as dc:
        assert dc.cancel_operation(op)["status"] == "Failed"


def test_bad_bodies_are_problems(api: Api) -> None:
    path = "/api/v1/operations/op_nope/resume"
    for body, word in ((b"[1]", "a JSON object"), (b'{"input": 3}', "input must be"),
                       (b'{"inputs": {}}', "unknown field 'inputs'"), (b"{", "not JSON")):
        doc = assert_problem(api.client.post(path, content=body,
                                             headers={"content-type": "application/json"}),
                             400)
        assert word in doc["detail"], doc
    assert_problem(api.client.post(path, content=b"confirm: x",
                                   headers={"content-type": "application/yaml"}), 415)
    assert_problem(api.client.post(path, json={"input": {}}), 404)
