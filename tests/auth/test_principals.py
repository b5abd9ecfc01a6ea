"""Principals: the local admin is the state directory's owner."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from devcell.auth.principals import Principal, Role, local_admin, local_user, valid_user


def test_the_local_admin_is_the_state_directorys_owner(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert local_admin(tmp_path) == Principal(me, Role.admin)
    assert local_user(tmp_path / "not-made-yet") == me  # who runs the command
    assert local_user() == me


@pytest.mark.parametrize("name", ["ana", "ana.b", "a_b-c", "ana@example.org", "0day", "x" * 64])
def test_valid_user_names(name: str) -> None:
    assert valid_user(name)


@pytest.mark.parametrize("name", ["", "-ana", ".ana", "@ana", "a b", "ana\n", "x" * 65,
                                  "ana/..", "ana\x1b"])
def test_invalid_user_names(name: str) -> None:
    assert not valid_user(name)
