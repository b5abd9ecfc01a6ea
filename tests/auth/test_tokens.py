"""The token store: shown once, kept only as an HMAC, revoked at once, never logged."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell import log
from devcell.auth import tokens
from devcell.auth.principals import Principal, Role
from devcell.errors import NotFound, Unauthenticated, UsageError
from devcell.store.db import Database, open_database


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def db(state: Path) -> Iterator[Database]:
    database = open_database(state)
    yield database
    database.close()


def refused(db: Database, token: str) -> str:
    with pytest.raises(Unauthenticated) as failed:
        tokens.authenticate(db, token)
    return str(failed.value)


def test_a_token_names_its_user_and_role(db: Database, state: Path) -> None:
    info, token = tokens.create(db, user="ana", role=Role.developer, created_by="root")
    assert re.fullmatch(r"dct_[0-9a-f]{12}_[0-9a-f]{64}", token)
    assert token.split("_")[1] == info.id
    assert (info.user, info.role, info.created_by, info.state()) == (
        "ana", "developer", "root", "active")
    assert tokens.authenticate(db, token) == Principal("ana", Role.developer)
    assert tokens.authenticate_token(state, token) == Principal("ana", Role.developer)
    assert tokens.listed(db) == [info]


def test_the_store_never_holds_the_token(db: Database, state: Path) -> None:
    _, token = tokens.create(db, user="ana", role=Role.admin)
    secret = token.rsplit("_", 1)[1]
    dump = "\n".join(db.conn.iterdump())
    assert secret not in dump and token not in dump
    for path in state.rglob("*"):  # the database, its WAL, the key: none holds the secret
        if path.is_file():
            data = path.read_bytes()
            assert secret.encode() not in data and bytes.fromhex(secret) not in data, path
    row = db.conn.execute("SELECT digest FROM tokens").fetchone()
    assert re.fullmatch(r"[0-9a-f]{64}", row["digest"])


def test_every_failure_says_the_same(db: Database) -> None:
    info, token = tokens.create(db, user="ana", role=Role.viewer)
    other_secret = token[:-1] + ("0" if token[-1] != "0" else "1")
    unknown_id = "dct_000000000000_" + token.rsplit("_", 1)[1]
    messages = {refused(db, t) for t in (other_secret, unknown_id, "", "dct_", token + "0",
                                         token.upper(), "x" * 10_000, " " + token)}
    assert messages == {str(Unauthenticated())}


def test_a_revoked_token_fails_at_once(db: Database, state: Path) -> None:
    info, token = tokens.create(db, user="ana", role=Role.developer)
    server = open_database(state)  # a server's connection, open before the revoke
    try:
        assert tokens.authenticate(server, token).user == "ana"
        revoked, was_active = tokens.revoke(db, info.id)
        assert was_active and revoked.state() == "revoked"
        refused(server, token)
        with pytest.raises(Unauthenticated):
            tokens.authenticate_token(state, token)
    finally:
        server.close()
    assert tokens.revoke(db, token) == (revoked, False)  # the whole token names it too
    assert [t.state() for t in tokens.listed(db)] == ["revoked"]


def test_revoking_an_unknown_id(db: Database) -> None:
    with pytest.raises(NotFound, match="no token with id 'abcdefabcdef'"):
        tokens.revoke(db, "abcdefabcdef")
    with pytest.raises(NotFound, match="12 hex digits"):
        tokens.revoke(db, "ana'; DROP TABLE tokens")


def test_revoking_a_mistyped_token_never_echoes_its_secret(db: Database) -> None:
    """`token revoke` takes the whole token too: one pasted with a character too many or too
    few must not be printed back (the terminal, a CI log, a bug report would keep it)."""
    info, token = tokens.create(db, user="ana", role=Role.developer)
    secret = token.split("_")[2]
    for typo in (token + "0", token[:-1], " " + token, token.upper()):
        with pytest.raises(NotFound) as refused:
            tokens.revoke(db, typo)
        assert secret[:16].lower() not in str(refused.value).lower()
        assert info.id in str(refused.value) or "token" in str(refused.value)
    assert tokens.authenticate(db, token).user == "ana"


def test_an_expired_token_fails(db: Database) -> None:
    info, token = tokens.create(db, user="ana", role=Role.developer, expires_in=3600)
    assert tokens.authenticate(db, token).user == "ana"
    with db.write() as conn:
        conn.execute("UPDATE tokens SET expires_at = '2000-01-01T00:00:00.000Z'")
    refused(db, token)
    assert tokens.listed(db)[0].state() == "expired"


def test_a_role_this_devcell_does_not_know_fails(db: Database) -> None:
    _, token = tokens.create(db, user="ana", role=Role.developer)
    with db.write() as conn:
        conn.execute("UPDATE tokens SET role = 'superuser'")
    refused(db, token)


def test_bad_input_is_refused(db: Database) -> None:
    with pytest.raises(UsageError, match="--user"):
        tokens.create(db, user="-ana", role=Role.viewer)
    with pytest.raises(UsageError, match="--expires"):
        tokens.create(db, user="ana", role=Role.viewer, expires_in=0)
    assert tokens.listed(db) == []


def test_a_token_given_as_the_user_is_not_repeated(db: Database) -> None:
    """A token pasted as --user (or a body's user, through the API) is refused without its
    secret in the message: it would stay in a terminal or a log."""
    _, token = tokens.create(db, user="ana", role=Role.viewer)
    with pytest.raises(UsageError, match="--user") as refused_as:
        tokens.create(db, user=token, role=Role.viewer)
    assert token[21:] not in str(refused_as.value)


def test_a_state_without_a_database_knows_no_token(tmp_path: Path) -> None:
    with pytest.raises(Unauthenticated):
        tokens.authenticate_token(tmp_path / "none", "dct_000000000000_" + "0" * 64)
    assert not (tmp_path / "none").exists()


def test_tokens_are_never_logged_nor_in_events(db: Database) -> None:
    lines: list[str] = []
    log.configure(lambda real: real.add(lines.append, level="TRACE", format="{message}"),
                  level="TRACE")
    log.logger.debug("capture works")
    info, token = tokens.create(db, user="ana", role=Role.developer)
    tokens.authenticate(db, token)
    with pytest.raises(Unauthenticated):
        tokens.authenticate(db, token + "0")
    tokens.revoke(db, info.id)
    assert any("capture works" in line for line in lines)
    assert not any(token.rsplit("_", 1)[1] in line for line in lines)
    events = db.conn.execute("SELECT reason, message FROM events WHERE object_kind = 'Token'"
                             ).fetchall()
    assert [e["reason"] for e in events] == ["TokenCreated", "TokenRevoked"]
    assert all(token.rsplit("_", 1)[1] not in e["message"] for e in events)
    assert info.id in events[0]["message"]


def test_the_database_is_owner_only(db: Database, state: Path) -> None:
    tokens.create(db, user="ana", role=Role.viewer)
    assert (state / "state.db").stat().st_mode & 0o077 == 0
    assert (state / "hash.key").stat().st_mode & 0o077 == 0
    assert isinstance(db.conn, sqlite3.Connection)


@pytest.mark.parametrize("role", [Role.viewer, Role.developer])
def test_a_token_acting_as_the_owner_is_an_admins(db: Database, state: Path,
                                                  role: Role) -> None:
    """A developer token named as the state directory's owner made cells that were the
    owner's, cloned with the server's git credentials: what rule host-owner keeps from every
    developer (found by attack45). Only an admin token may act as the owner."""
    from devcell.auth.principals import local_user

    owner = local_user(state)
    with pytest.raises(UsageError, match="state directory's owner"):
        tokens.create(db, user=owner, role=role)
    assert tokens.listed(db) == []
    info, _ = tokens.create(db, user=owner, role=Role.admin)
    assert info.user == owner
