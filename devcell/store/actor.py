"""Who is making the changes being recorded: the `actor` of every event and operation, and
the owner of a cell made without one.

A server sets it where a request enters (`acting_as`: the principal its token named, for
that request); a context variable, so each thread and each asyncio task sees the actor of its
own request. Where nobody set one (the direct CLI, the daemon's own reconciles, a library
caller) the actor is the state directory's owner, who runs this process: store/state_dir.py
refuses a state directory of anyone else's. Found when a change is first recorded, so a
command that records nothing (`get`) never looks the user up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

_current: ContextVar[str | None] = ContextVar("devcell_actor", default=None)


def current() -> str:
    """The user the changes being recorded are made by."""
    return _current.get() or _local()


def _local() -> str:
    global _local_name
    if _local_name is None:
        _local_name = local_user()
    return _local_name


_local_name: str | None = None
"""The process's user's name, looked up once."""


@contextmanager
def acting_as(user: str | None) -> Iterator[None]:
    """Within: every change recorded in this context is `user`'s (a server's request)."""
    token = _current.set(user)
    try:
        yield
    finally:
        _current.reset(token)


def local_user(state_dir: Path | None = None) -> str:
    """The name of the state directory's owner (of who runs this process, when it is not made
    yet): the direct CLI's actor, and the owner of a cell made without one."""
    uid = os.geteuid()
    if state_dir is not None:
        try:
            uid = state_dir.stat().st_uid
        except OSError:
            pass
    import pwd
    import re

    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a passwd entry (a container's): its number names it
        return f"uid-{uid}"
    # The pattern of a user's name (auth.principals.USER_PATTERN); a login name outside it
    # (a space, a control character) is named by its uid.
    ok = re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}", name) is not None
    return name if ok else f"uid-{uid}"
