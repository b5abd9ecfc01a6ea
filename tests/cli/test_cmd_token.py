"""`devcell token create|list|revoke`: printed once, listed without it, revoked at once, and
never in a log line, an event or the database."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from devcell.auth import tokens
from devcell.cli.main import main
from devcell.errors import Unauthenticated
from tests.conftest import db_fingerprint


def run(state: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["--state-dir", str(state), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    code, out, err = run(state, capsys, "-v", "-v", "token", "create", "--user", "ana",
                         "--role", "developer", "--expires", "90d")
    assert code == 0, err
    token = out.strip()
    assert re.fullmatch(r"dct_[0-9a-f]{12}_[0-9a-f]{64}", token)
    token_id, secret = token.split("_")[1:]
    assert f"token/{token_id} made for ana (developer), valid until 20" in err
    assert secret not in err
    assert tokens.authenticate_token(state, token).user == "ana"

    code, out, err = run(state, capsys, "-v", "-v", "token", "list")
    assert code == 0 and secret not in out + err
    header, row = out.splitlines()
    assert header.split() == ["ID", "USER", "ROLE", "STATE", "CREATED", "EXPIRES", "CREATED-BY"]
    assert row.split()[:4] == [token_id, "ana", "developer", "active"]

    assert run(state, capsys, "token", "revoke", token_id)[:2] == (0, f"token/{token_id} revoked\n")
    with pytest.raises(Unauthenticated):
        tokens.authenticate_token(state, token)
    assert run(state, capsys, "token", "revoke", token_id)[:2] == (
        0, f"token/{token_id} already revoked\n")
    code, out, _ = run(state, capsys, "token", "list", "-o", "json")
    assert [(t["id"], t["state"]) for t in json.loads(out)["items"]] == [(token_id, "revoked")]

    code, out, err = run(state, capsys, "get", "events", "-o", "json")
    assert code == 0 and token_id in out and secret not in out
    dump = (state / "state.db").read_bytes() + (state / "state.db-wal").read_bytes()
    assert secret.encode() not in dump


def test_bad_input_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    assert run(state, capsys, "token", "list")[::2] == (0, "No tokens.\n")
    assert not state.exists()
    run(state, capsys, "token", "create", "--user", "bob", "--role", "viewer")
    before = db_fingerprint(state)
    with pytest.raises(SystemExit) as usage:
        main(["--state-dir", str(state), "token", "create", "--user", "ana", "--role", "root"])
    assert usage.value.code == 2
    code, out, err = run(state, capsys, "token", "create", "--user", "ana", "--role", "viewer",
                         "--expires", "soon")
    assert (code, out) == (2, "") and "--expires 'soon'" in err
    code, out, err = run(state, capsys, "token", "create", "--user=-x", "--role", "viewer")
    assert (code, out) == (2, "") and "--user '-x'" in err
    code, out, err = run(state, capsys, "token", "revoke", "0123456789ab")
    assert code == 1 and "no token with id '0123456789ab'" in err
    assert db_fingerprint(state) == before


def test_revoke_with_no_state_makes_nothing(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    code, _, err = run(state, capsys, "token", "revoke", "0123456789ab")
    assert code == 1 and "nothing has been applied there yet" in err
    assert not (state / "state.db").exists()


def _recorded(state: Path) -> list[tokens.TokenInfo]:
    from devcell.store import db

    opened = db.open_database(state, create=False)
    try:
        return tokens.listed(opened)
    finally:
        opened.close()


def _created_into(state: Path, stdout: int) -> tuple[int, str]:
    """`token create` run as the program is, its standard output `stdout`: (exit, stderr)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "devcell", "--state-dir", str(state), "token",
                           "create", "--user", "lost", "--role", "admin"], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, check=False)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("output", ["closed-pipe", "full"])
def test_a_token_whose_secret_could_not_be_written_is_revoked(
        tmp_path: Path, output: str) -> None:
    """`token create | head -0` exited 0 saying nothing, `> /dev/full` said only that the
    output failed: each left an active token whose secret nobody had, unnamed (final43, F2)."""
    import os

    state = tmp_path / "state"
    if output == "full":
        with open("/dev/full", "w") as full:
            code, err = _created_into(state, full.fileno())
    else:
        read, write = os.pipe()
        os.close(read)  # its reader is gone: every write fails (EPIPE)
        try:
            code, err = _created_into(state, write)
        finally:
            os.close(write)
    [listed] = _recorded(state)
    assert (code, listed.state()) == (1, "revoked"), err
    why = "No space left on device" if output == "full" else "Broken pipe"
    assert err == (f"error: token/{listed.id} was made for lost (admin), but the standard "
                   f"output did not take it ({why}): it was revoked (nobody holds its "
                   "secret); make another with an output that takes it\n")


def test_a_token_that_could_not_be_revoked_either_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from devcell.errors import StateError

    def refused(db: object, token_id: str) -> None:
        raise StateError("the database is locked")

    state = tmp_path / "state"
    monkeypatch.setattr(tokens, "revoke", refused)
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        code, _, err = run(state, capsys, "token", "create", "--user", "kept", "--role", "viewer")
    [listed] = _recorded(state)
    assert (code, listed.state()) == (1, "active")
    assert err == (f"error: token/{listed.id} was made for kept (viewer), but the standard "
                   "output did not take it (No space left on device), and revoking it failed "
                   "(the database is locked): nobody holds its secret: revoke it with "
                   f"`devcell token revoke {listed.id}`\n")
