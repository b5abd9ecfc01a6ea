"""The migrations in plain SQL write the schema sqlite-utils wrote (tests/store/schema_v10.sql,
taken from sqlite-utils' migrations before they were rewritten), whether a state directory is
made afresh or upgraded from any older version, and keep the rows an upgrade finds."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from devcell.store import actor, migrations
from devcell.store.db import open_database

GOLDEN = Path(__file__).with_name("schema_v10.sql")


def _schema(state: Path) -> str:
    """sqlite_master in order, written as schema_v10.sql is."""
    conn = sqlite3.connect(state / "state.db")
    try:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid")
        lines = []
        for kind, name, table, sql in rows:
            lines.append(f"-- {kind} {name} on {table}")
            lines.append(f"{sql};" if sql is not None else "-- (made by SQLite)")
        return "\n".join(lines) + "\n"
    finally:
        conn.close()


def _golden() -> str:
    return "".join(GOLDEN.read_text().splitlines(keepends=True)[2:])  # its two comment lines


def _at(state: Path, version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A state directory left at schema `version`."""
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:version])
        m.setattr(migrations, "LATEST", version)
        open_database(state).close()


def test_a_fresh_database_at_version_10_has_the_schema_sqlite_utils_wrote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _at(tmp_path / "state", 10, monkeypatch)
    assert _schema(tmp_path / "state") == _golden()


@pytest.mark.parametrize("version", range(1, migrations.LATEST))
def test_an_upgraded_database_has_the_schema_of_a_fresh_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    open_database(tmp_path / "fresh").close()
    _at(tmp_path / "old", version, monkeypatch)
    open_database(tmp_path / "old").close()
    assert _schema(tmp_path / "old") == _schema(tmp_path / "fresh")


def test_an_upgrade_fills_the_new_columns_from_the_rows_it_finds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    _at(state, 2, monkeypatch)
    conn = sqlite3.connect(state / "state.db")
    with conn:
        conn.execute(
            "INSERT INTO cells (id, name, spec, spec_hash, manifest_hash, generation, "
            "resource_version, phase, created_at, updated_at, backend) VALUES ('c1', 'api', "
            "'{\"state\": \"Running\", \"image\": \"busybox\"}', 'h', 'm', 1, 1, 'Ready', "
            "'t', 't', 'fake')")
    conn.close()
    db = open_database(state)
    try:
        row = db.execute("SELECT desired_state, image, owner, observed_generation, labels "
                         "FROM cells").fetchone()
        assert tuple(row) == ("Running", "busybox", actor.local_user(), 0, "{}")
    finally:
        db.close()


def test_opening_a_fresh_state_directory_never_imports_sqlite_utils(tmp_path: Path) -> None:
    code = ("import sys; from devcell.store.db import open_database; "
            f"open_database(__import__('pathlib').Path({str(tmp_path / 'state')!r})).close(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('sqlite_utils', 'dateutil', 'pluggy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
    assert (tmp_path / "state" / "state.db").is_file()
