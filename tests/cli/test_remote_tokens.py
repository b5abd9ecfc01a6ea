"""`token create|list|revoke` through a server (cli/remote_tokens.py): what a server answers
is printed escaped, and an answer that is not a token's is one error line: a made-up server
never writes a terminal escape, nor something else than a token where a script reads one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from devcell.cli import remote_tokens
from devcell.errors import DevCellError

HOSTILE = "\x1b]0;pwned\x07"
ID = "0123456789ab"
TOKEN = f"dct_{ID}_" + "f" * 64


def _item(**changed: Any) -> dict[str, Any]:
    return {"id": ID, "user": "ana", "role": "viewer", "state": "active",
            "createdAt": "2026-01-01T00:00:00.000Z", "createdBy": "root", "expiresAt": None,
            "revokedAt": None, **changed}


class Server:
    url = "unix:/x"

    def __init__(self, item: dict[str, Any], token: str = TOKEN) -> None:
        self.item, self.token = item, token

    def tokens(self) -> list[dict[str, Any]]:
        return [self.item]

    def create_token(self, user: str, role: str, *, expires: str | None = None
                     ) -> tuple[str, dict[str, Any]]:
        return self.token, self.item

    def revoke_token(self, token_id: str) -> tuple[dict[str, Any], bool]:
        return self.item, True


def _args(server: Server, **more: Any) -> Any:
    return SimpleNamespace(remote=server, output=None, user="ana", role="viewer",
                           expires=None, id=ID, **more)


@pytest.mark.parametrize("field", ["createdAt", "expiresAt", "revokedAt", "user", "createdBy"])
def test_a_listed_field_is_printed_escaped(field: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert remote_tokens.run_token_list(_args(Server(_item(**{field: HOSTILE})))) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out


@pytest.mark.parametrize("item", [_item(id=HOSTILE), _item(id="dct_x"), _item(role=HOSTILE),
                                  _item(role="root")], ids=["id", "id-token", "role", "role-unknown"])
def test_a_record_that_is_not_a_tokens_is_not_devcells_api(item: dict[str, Any]) -> None:
    for run in (remote_tokens.run_token_list, remote_tokens.run_token_revoke,
                remote_tokens.run_token_create):
        with pytest.raises(DevCellError, match="is it DevCell's API"):
            run(_args(Server(item)))


@pytest.mark.parametrize("token", [HOSTILE, "dct_" + "0" * 12 + "_" + "f" * 64, TOKEN + "\n"],
                         ids=["escape", "another-id", "newline"])
def test_a_made_token_that_is_not_one_is_not_devcells_api(
        token: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DevCellError, match="is it DevCell's API"):
        remote_tokens.run_token_create(_args(Server(_item(), token)))
    assert capsys.readouterr().out == ""


def test_a_made_token_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert remote_tokens.run_token_create(_args(Server(_item()))) == 0
    assert capsys.readouterr().out == TOKEN + "\n"


@pytest.mark.parametrize("revocable", [True, False])
def test_a_made_token_the_output_did_not_take_is_revoked_or_named(
        revocable: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a server as on its machine (final43, F2): the token made is revoked by its id
    when stdout does not take it; when the revoke fails too, the id to revoke is said."""
    import sys

    revoked: list[str] = []

    class Revoking(Server):
        def revoke_token(self, token_id: str) -> tuple[dict[str, Any], bool]:
            if not revocable:
                raise DevCellError("DevCell API at unix:/x: the server closed the connection")
            revoked.append(token_id)
            return self.item, True

    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        with pytest.raises(DevCellError) as failed:
            remote_tokens.run_token_create(_args(Revoking(_item())))
    said = str(failed.value)
    assert said.startswith(f"token/{ID} was made for ana (viewer), but the standard output did "
                           "not take it (No space left on device)")
    assert TOKEN not in said
    if revocable:
        assert revoked == [ID] and "it was revoked" in said
    else:
        assert said.endswith(f"revoke it with `devcell token revoke {ID}`")
