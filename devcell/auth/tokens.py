"""The token store: tokens that let an HTTP client act as a user with a role.

A token is `dct_<id>_<secret>`: the id (12 hex digits) finds its row, the secret (32 random
bytes, 64 hex digits) proves it. It is shown once, when made; the store keeps only an
HMAC-SHA256 of the whole token under a key derived from the state directory's hash key
(store.hashkey), so neither the database nor a copy of it yields a usable token, and a
guess cannot be checked without the key. Checking compares digests in constant time.

Users are implied: a user exists while a token names them. A revoked token fails the very
next authentication (each one reads its row), as does an expired one; every failure says
the same thing (errors.Unauthenticated), so a caller learns nothing that helps guessing.
Making and revoking a token records an event naming it by id (never the token).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from devcell.auth.principals import Principal, Role, local_user, valid_user
from devcell.errors import NotFound, StateError, Unauthenticated, UsageError
from devcell.records import Record
from devcell.store import events
from devcell.store.clock import now
from devcell.store.db import Database

PREFIX = "dct"
KIND = "Token"
"""The events table's object kind for a token."""
_TOKEN = re.compile(r"dct_([0-9a-f]{12})_([0-9a-f]{64})")
_ID = re.compile(r"[0-9a-f]{12}")
_MAX_LENGTH = 128
"""Longer input is refused before any work (a token is 81 characters)."""
_DOMAIN = b"devcell token v1"
"""Separates the tokens' key from the other uses of the state's hash key."""


class TokenInfo(Record):
    """A token as listed: everything but the token, which the store never had."""

    id: str
    user: str
    role: str
    created_at: str
    created_by: str | None
    expires_at: str | None
    revoked_at: str | None

    def state(self, at: str | None = None) -> str:
        """`active`, `revoked` or `expired` (at `at`, a store timestamp; now by default)."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= (at or now()):
            return "expired"
        return "active"


def _key(db: Database) -> bytes:
    return hmac.new(db.hash_key, _DOMAIN, hashlib.sha256).digest()


def _digest(key: bytes, token: str) -> str:
    return hmac.new(key, token.encode("ascii"), hashlib.sha256).hexdigest()


def _info(row: sqlite3.Row) -> TokenInfo:
    return TokenInfo(row["id"], row["user"], row["role"], row["created_at"], row["created_by"],
                     row["expires_at"], row["revoked_at"])


def create(db: Database, *, user: str, role: Role, expires_in: int | None = None,
           created_by: str | None = None) -> tuple[TokenInfo, str]:
    """A new token for `user` with `role`, valid for `expires_in` seconds (None: until
    revoked). Returns what is recorded and the token itself, which nothing keeps: show it
    once."""
    if not valid_user(user):
        raise UsageError(f"--user {hidden(user)!r}: a user name is 1-64 letters, digits and "
                         ". _ @ - (not starting with . @ -)")
    if expires_in is not None and expires_in <= 0:
        raise UsageError("--expires: a token must be valid for at least 1s")
    if role is not Role.admin and user == local_user(db.state_dir):
        # its cells would be the owner's, which clone with the server's git credentials:
        # what rule host-owner keeps from every developer (found by attack45)
        raise UsageError(f"--user {user}: that is the state directory's owner, whose cells "
                         "clone with the server's git credentials: a token acting as them is "
                         "an admin's (--role admin); give a developer or viewer their own name")
    expires_at = None
    if expires_in is not None:
        when = datetime.now(UTC) + timedelta(seconds=expires_in)
        expires_at = when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    key = _key(db)
    with db.write() as conn:
        for _ in range(5):
            token_id = os.urandom(6).hex()
            if conn.execute("SELECT 1 FROM tokens WHERE id = ?", (token_id,)).fetchone() is None:
                break
        else:  # 48 random bits taken five times over: the random source is broken
            raise StateError("could not draw an unused token id")
        token = f"{PREFIX}_{token_id}_{os.urandom(32).hex()}"
        created = now()
        conn.execute("INSERT INTO tokens (id, user, role, digest, created_at, created_by, "
                     "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (token_id, user, str(role), _digest(key, token), created, created_by,
                      expires_at))
        events.record(conn, kind=KIND, object_id=token_id, name=token_id,
                      reason="TokenCreated",
                      message=f"token {token_id} made for user {user} ({role})"
                              + (f", expires {expires_at}" if expires_at else ""))
    return TokenInfo(token_id, user, str(role), created, created_by, expires_at, None), token


def listed(db: Database) -> list[TokenInfo]:
    """Every token recorded (revoked and expired ones too), oldest first."""
    rows = db.conn.execute("SELECT id, user, role, created_at, created_by, expires_at, "
                           "revoked_at FROM tokens ORDER BY created_at, id").fetchall()
    return [_info(row) for row in rows]


def revoke(db: Database, token_id: str) -> tuple[TokenInfo, bool]:
    """Revoke the token `token_id` (its id, or the whole token): the next authentication
    with it fails. Returns the token and whether it was active until now (False: it was
    revoked already). NotFound when no token has that id."""
    match = _TOKEN.fullmatch(token_id) if len(token_id) <= _MAX_LENGTH else None
    if match is not None:
        token_id = match.group(1)
    if not _ID.fullmatch(token_id):
        raise NotFound(f"no token with id {_shown(token_id)} (an id is 12 hex digits, as "
                       "`devcell token list` shows)")
    with db.write() as conn:
        row = conn.execute("SELECT * FROM tokens WHERE id = ?", (token_id,)).fetchone()
        if row is None:
            raise NotFound(f"no token with id {token_id!r} (`devcell token list` shows them)")
        if row["revoked_at"] is not None:
            return _info(row), False
        revoked = now()
        conn.execute("UPDATE tokens SET revoked_at = ? WHERE id = ?", (revoked, token_id))
        events.record(conn, kind=KIND, object_id=token_id, name=token_id,
                      reason="TokenRevoked",
                      message=f"token {token_id} of user {row['user']} revoked")
        info = _info(row)
        return TokenInfo(info.id, info.user, info.role, info.created_at, info.created_by,
                         info.expires_at, revoked), True


def id_of(given: str) -> str | None:
    """The token id `given` names (an id, or a whole token's), None when it is neither: a
    client sends a server the id alone, never a token in a URL."""
    if len(given) > _MAX_LENGTH:
        return None
    match = _TOKEN.fullmatch(given)
    if match is not None:
        return match.group(1)
    return given if _ID.fullmatch(given) else None


_IN_TEXT = re.compile(r"dct_([0-9a-f]{12})_[0-9a-f]{64}")


def hidden(text: str) -> str:
    """`text` with every whole token in it cut to its id (`dct_ID_… (not shown)`): what an
    error repeats of a request (a path or a name a token was pasted into) never holds a
    secret, in an answer nor in the terminal or log that shows it."""
    return _IN_TEXT.sub(r"dct_\1_… (not shown)", text) if "dct_" in text else text


def document(info: TokenInfo) -> dict[str, str | None]:
    """A token as `token list -o json` and the API list it: everything but the token."""
    return {"id": info.id, "user": info.user, "role": info.role, "state": info.state(),
            "createdAt": info.created_at, "createdBy": info.created_by,
            "expiresAt": info.expires_at, "revokedAt": info.revoked_at}


def _shown(given: str) -> str:
    """What a refusal may print of what was given as a token's id: never something that may
    be a mistyped token (its secret would stay in a terminal or a log)."""
    if len(given) > 24 or f"{PREFIX}_" in given.lower():
        return "(a token, not shown)"
    return repr(given)


def authenticate(db: Database, token: str) -> Principal:
    """The principal `token` names; errors.Unauthenticated, always with the same message,
    when it is malformed, unknown, expired or revoked, or its role is not one this DevCell
    knows."""
    match = _TOKEN.fullmatch(token) if isinstance(token, str) and len(token) <= _MAX_LENGTH \
        else None
    if match is None:
        raise Unauthenticated()
    row = db.conn.execute("SELECT user, role, digest, expires_at, revoked_at FROM tokens "
                          "WHERE id = ?", (match.group(1),)).fetchone()
    given = _digest(_key(db), token)  # computed whether or not the id is known
    stored = row["digest"] if row is not None else "0" * 64
    if not hmac.compare_digest(given, stored) or row is None:
        raise Unauthenticated()
    if row["revoked_at"] is not None or (row["expires_at"] is not None
                                         and row["expires_at"] <= now()):
        raise Unauthenticated()
    try:
        role = Role(row["role"])
    except ValueError:
        raise Unauthenticated() from None
    return Principal(row["user"], role)


def authenticate_token(state_dir: Path, token: str) -> Principal:
    """authenticate() against the state in `state_dir` (opened for this one check: a
    server keeping its Database open calls authenticate() instead). A state directory
    without a database holds no token: Unauthenticated, as any unknown token."""
    try:
        db = Database(state_dir, create=False)
    except StateError:
        raise Unauthenticated() from None
    try:
        return authenticate(db, token)
    finally:
        db.close()
