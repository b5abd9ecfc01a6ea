"""devcell.manifests.validator_cache: a kind's compiled validator is kept in the state
directory between commands, and an entry is loaded only when it is safely the state's own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import fastjsonschema
import pytest

from devcell import schemas
from devcell.manifests import validator_cache

GOOD = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": "api"},
        "spec": {"backend": "fake"}}
BAD = {**GOOD, "spec": {"backend": "fake", "state": "Dancing"}}
SNAPSHOT = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": "s"}, "spec": {"cell": "api"}}
BAD_SNAPSHOT = {**SNAPSHOT, "spec": {"cell": "api", "retention": "forever"}}
KEY = b"k" * 32


@pytest.fixture
def state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    return state


def _judges(validate: Any, good: Any = GOOD, bad: Any = BAD) -> tuple[bool, bool]:
    def ok(document: dict[str, Any]) -> bool:
        try:
            validate(document)
        except fastjsonschema.JsonSchemaException:
            return False
        return True
    return ok(good), ok(bad)


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that says "compiled" each time the validator is made afresh."""
    made: list[str] = []
    real = fastjsonschema.compile_to_code

    def counted(*args: Any, **kwargs: Any) -> str:
        made.append("compiled")
        return real(*args, **kwargs)
    monkeypatch.setattr(fastjsonschema, "compile_to_code", counted)
    return made


def _cell(place: validator_cache.Place | None) -> Any:
    return validator_cache.validator("Cell", schemas.schema_text("Cell"), place)


def test_the_second_command_loads_what_the_first_compiled(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    place = validator_cache.at(state, KEY)
    made = _compiles(monkeypatch)
    assert _judges(_cell(place)) == (True, False)
    [entry] = (state / "validators").iterdir()
    assert entry.name == validator_cache.entry_name("Cell", schemas.schema_text("Cell"))
    assert entry.stat().st_mode & 0o777 == 0o600
    assert (state / "validators").stat().st_mode & 0o777 == 0o700
    assert _judges(_cell(place)) == (True, False)
    assert made == ["compiled"]  # the second time, loaded


def test_another_schema_text_is_another_entry_and_replaces_the_kinds_old_one(
        state: Path) -> None:
    place = validator_cache.at(state, KEY)
    text = schemas.schema_text("Snapshot")
    validator_cache.validator("Snapshot", text, place)
    validator_cache.validator("Snapshot", text + "\n", place)
    assert [p.name for p in (state / "validators").iterdir()] == [
        validator_cache.entry_name("Snapshot", text + "\n")]


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(state: Path) -> None:
    """A writer killed between open and rename leaves `.NAME.PID.RAND.tmp`; the next entry
    written removes it once its pid is gone, never a live writer's, nor a file of another
    shape."""
    import subprocess
    import sys

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead_pid = int(ended.stdout)
    text = schemas.schema_text("Snapshot")
    name = validator_cache.entry_name("Snapshot", text)
    (state / "validators").mkdir(mode=0o700)
    dead = state / "validators" / f".{name}.{dead_pid}.0badc0de.tmp"
    live = state / "validators" / f".{name}.1.0badc0de.tmp"  # pid 1 runs
    other = state / "validators" / "notes.tmp"
    for path in (dead, live, other):
        path.write_bytes(b"half")
    validator_cache.validator("Snapshot", text, validator_cache.at(state, KEY))
    assert sorted(p.name for p in (state / "validators").iterdir()) == sorted(
        [name, live.name, other.name])


@pytest.mark.parametrize("spoil", ["damaged", "other-key", "renamed", "group-readable",
                                   "link", "fifo", "other-owner", "open-directory"])
def test_an_entry_not_safely_the_states_own_is_never_loaded(
        state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spoil: str) -> None:
    text = schemas.schema_text("Snapshot")
    place = validator_cache.at(state, KEY)
    validator_cache.validator("Snapshot", text, place)
    [entry] = (state / "validators").iterdir()
    if spoil == "damaged":  # a bit flipped: the digest does not match
        data = bytearray(entry.read_bytes())
        data[-100] ^= 1
        entry.write_bytes(bytes(data))
    elif spoil == "other-key":  # another state's entry copied in
        place = validator_cache.at(state, b"x" * 32)
    elif spoil == "renamed":  # another entry's content under this name
        other = validator_cache.at(tmp_path / "other", KEY)
        (tmp_path / "other").mkdir(mode=0o700)
        validator_cache.validator("Snapshot", text + "\n", other)
        [theirs] = (tmp_path / "other" / "validators").iterdir()
        entry.write_bytes(theirs.read_bytes())
    elif spoil == "group-readable":
        entry.chmod(0o640)
    elif spoil == "link":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.write_bytes(entry.read_bytes())
        elsewhere.chmod(0o600)
        entry.unlink()
        entry.symlink_to(elsewhere)
    elif spoil == "fifo":
        entry.unlink()
        os.mkfifo(entry, 0o600)
    elif spoil == "other-owner":
        if os.geteuid() != 0:
            pytest.skip("changing a file's owner needs root")
        os.chown(entry, 65534, 65534)
    else:
        (state / "validators").chmod(0o777)
    made = _compiles(monkeypatch)
    assert _judges(validator_cache.validator("Snapshot", text, place), SNAPSHOT,
                   BAD_SNAPSHOT) == (True, False)
    assert made == ["compiled"]


def test_without_a_key_or_a_state_of_ones_own_nothing_is_written(
        tmp_path: Path, state: Path) -> None:
    assert validator_cache.at(state, None) is None
    assert _judges(_cell(None)) == (True, False)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    text = schemas.schema_text("Snapshot")
    validator_cache.validator("Snapshot", text, validator_cache.at(shared, KEY))
    assert list(shared.iterdir()) == []
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    validator_cache.validator("Snapshot", text, validator_cache.at(blocker, KEY))
    assert blocker.read_text() == ""
