"""GET /api/v1/tokens, POST /api/v1/tokens and DELETE /api/v1/tokens/ID: `devcell token
list|create|revoke` through the API, an admin's alone (rule `token-admin`).

A made token is in the answer once (`Cache-Control: no-store`), never in a log or an event
(the server keeps no access log; the event names the token's id). A revoke is asked by id:
a whole token in a path is refused without being repeated, as a mistyped one on the command
line is (auth.tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devcell.auth import policy, tokens
from devcell.errors import NotFound, UsageError
from devcell.server import bodies

MAX_BODY_BYTES = 4 << 10
"""A create's body: a user, a role and a duration."""
TOKENS = policy.ResourceRef("Token")


def listed(state_dir: Path, principal: Any) -> dict[str, Any]:
    """Every token recorded (revoked and expired ones too), oldest first."""
    from devcell.store.db import Database

    policy.require(principal, policy.Verb.token_admin, TOKENS)
    db = Database(state_dir, create=False)
    try:
        items = [tokens.document(t) for t in tokens.listed(db)]
    finally:
        db.close()
    return {"apiVersion": "devcell.dev/v1alpha1", "kind": "List", "items": items,
            "metadata": {}}


def create(state_dir: Path, principal: Any, data: bytes) -> dict[str, Any]:
    """A token for the body's user and role, made in the caller's name: {"token", "item"}."""
    from devcell.auth.principals import Role
    from devcell.manifests.quantities import duration_seconds
    from devcell.store import actor
    from devcell.store.db import Database

    policy.require(principal, policy.Verb.token_admin, TOKENS)
    body = bodies.json_object(data, "a token", ["user", "role", "expires"],
                              "user, role and expires (a duration such as 90d; none: until "
                              "revoked)")
    user, role, expires = body.get("user"), body.get("role"), body.get("expires")
    if not isinstance(user, str):
        raise UsageError("a token: user must be text (the user the token acts as)")
    if role not in [r.value for r in Role]:
        raise UsageError("a token: role must be viewer, developer or admin")
    expires_in = None
    if expires is not None:
        try:
            expires_in = duration_seconds(expires) if isinstance(expires, str) else None
        except ValueError:
            expires_in = None
        if expires_in is None:
            raise UsageError("a token: expires must be a duration such as 30m, 12h or 90d")
    db = Database(state_dir, create=False)
    try:
        with actor.acting_as(principal.user):
            info, token = tokens.create(db, user=user, role=Role(role), expires_in=expires_in,
                                        created_by=principal.user)
    finally:
        db.close()
    return {"token": token, "item": tokens.document(info)}


def revoke(state_dir: Path, principal: Any, given: str) -> dict[str, Any]:
    """Revoke the token with id `given`: {"item", "revoked": whether it was active until
    now}."""
    from devcell.store import actor
    from devcell.store.db import Database

    policy.require(principal, policy.Verb.token_admin, TOKENS)
    if tokens.id_of(given) != given:  # a whole token in a URL: refused, never repeated
        raise NotFound("no token with that id (an id is 12 hex digits, as `devcell token "
                       "list` shows; send the id, never a token)")
    db = Database(state_dir, create=False)
    try:
        with actor.acting_as(principal.user):
            info, was_active = tokens.revoke(db, given)
    finally:
        db.close()
    return {"item": tokens.document(info), "revoked": was_active}
