"""Where the state directory is: resolve() (a Path, every command) and location() (a string
made without pathlib, exec's fast path) name the same directory, or location() leaves the
case to resolve(); a current directory that was removed is said, never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devcell.errors import StateError
from devcell.store import state_dir


def _same(explicit: str | None) -> None:
    found = state_dir.location(explicit)
    assert found is not None
    assert os.path.normpath(found) == os.path.normpath(state_dir.resolve(explicit))


@pytest.mark.parametrize("explicit", ["/abs/dir", "rel/dir", "./x//y/", "~/s", "a/../b"])
def test_location_and_resolve_name_the_same_directory(
        explicit: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    _same(explicit)
    monkeypatch.setenv("DEVCELL_HOME", explicit)
    _same(None)
    monkeypatch.delenv("DEVCELL_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", explicit.lstrip("~"))
    _same(None)


def test_an_absolute_state_directory_from_a_removed_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`devcell exec` run in a directory removed meanwhile (a build tree) was a traceback
    (FileNotFoundError from os.getcwd) on the fast path, even with --state-dir /abs, which
    every other command used as given (found by attack41)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DEVCELL_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert state_dir.location("/abs/dir") == "/abs/dir"
    assert state_dir.location(None) == str(tmp_path / "home" / ".local" / "share" / "devcell")
    assert state_dir.resolve("/abs/dir") == Path("/abs/dir")
    # a relative one cannot be placed: location leaves it to resolve, which says why
    assert state_dir.location("rel") is None
    with pytest.raises(StateError, match="the state directory rel is relative to the current "
                       "directory, which was removed"):
        state_dir.resolve("rel")
