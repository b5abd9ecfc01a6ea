"""Roles and principals: who a request acts as.

A principal is a user name and a role. Users are not a table of their own: a user exists
when a token names them (tokens.py), and the state directory's owner is always there as the
local admin, which the direct CLI and the daemon's unix socket act as (whoever can open the
state directory can already do everything it holds).
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

from devcell.records import Record
from devcell.store import actor

USER_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$"
"""A user name: a login name or an e-mail address, at most 64 characters (the schema's
spec.sharedWith items use the same pattern)."""
_USER = re.compile(USER_PATTERN)


class Role(StrEnum):
    """What a principal may do, each including the one before: a viewer lists, gets and
    watches; a developer also makes cells and changes their own (and those shared with them);
    an admin does everything, tokens included."""

    viewer = "viewer"
    developer = "developer"
    admin = "admin"


class Principal(Record):
    """Who a request acts as."""

    user: str
    role: Role


def valid_user(name: str) -> bool:
    """Whether `name` can be a user's name (a token's, an owner's, a sharedWith entry)."""
    return bool(_USER.match(name)) and not name.endswith("\n")


def local_user(state_dir: Path | None = None) -> str:
    """The name of the state directory's owner (who runs the command, when it is not made
    yet): the direct CLI's user, and the owner of the cells it makes."""
    return actor.local_user(state_dir)


def local_admin(state_dir: Path | None = None) -> Principal:
    """The principal of the direct CLI and of the daemon's unix socket: the state directory's
    owner, an admin."""
    return Principal(local_user(state_dir), Role.admin)
