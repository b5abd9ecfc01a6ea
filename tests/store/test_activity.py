"""The activity record idle sleep judges by: sessions open and closed, a process gone, a
reused pid, a port-forward open only while a connection is."""

from __future__ import annotations

import os
import time
from pathlib import Path

from devcell.store import activity

CELL = "cell_0000000000000000000000test"


def test_a_session_is_open_until_closed_and_its_close_is_the_last_activity(
        tmp_path: Path) -> None:
    assert activity.seen(tmp_path, CELL) == activity.Seen((), None)
    with activity.Session(tmp_path, CELL, "ssh"):
        seen = activity.seen(tmp_path, CELL)
        assert [a.what for a in seen.open] == ["ssh session"] and seen.last is None
    seen = activity.seen(tmp_path, CELL)
    assert seen.open == ()
    assert seen.last is not None and seen.last.what == "ssh session closed"
    assert abs(seen.last.at.timestamp() - time.time()) < 60


def test_a_reused_pid_does_not_keep_a_session_open(tmp_path: Path) -> None:
    """A session file naming this process's pid, written long before this process started:
    the pid was given to another process since."""
    session = activity.Session(tmp_path, CELL, "exec")
    long_ago = time.time() - 10 * 365 * 86400
    os.utime(session.path, (long_ago, long_ago))
    seen = activity.seen(tmp_path, CELL)
    assert seen.open == ()
    assert seen.last is not None and seen.last.what == "exec session ended (its process was gone)"


def test_a_port_forward_is_open_while_a_connection_is(tmp_path: Path) -> None:
    connections = activity.Connections(tmp_path, CELL, "port-forward")
    assert activity.seen(tmp_path, CELL).open == ()
    connections.opened()
    connections.opened()
    connections.closed()
    assert [a.what for a in activity.seen(tmp_path, CELL).open] == ["port-forward connection"]
    connections.closed()
    seen = activity.seen(tmp_path, CELL)
    assert seen.open == ()
    assert seen.last is not None and seen.last.what == "port-forward connection closed"


def test_a_link_planted_as_the_record_is_not_followed(tmp_path: Path) -> None:
    directory = tmp_path / activity.DIRECTORY / CELL
    directory.mkdir(parents=True)
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (directory / activity.LAST).symlink_to(target)
    activity.note(tmp_path, CELL, "exec session closed")  # refused, not written through
    assert target.read_text() == "keep"
    assert activity.seen(tmp_path, CELL).last is None


def test_an_unwritable_state_directory_refuses_no_command(tmp_path: Path) -> None:
    (tmp_path / activity.DIRECTORY).write_text("not a directory")
    assert activity.open_session(tmp_path, CELL, "exec") is None
