"""A recorded cell read read-only (store/cell_glance.py), for the exec fast path: by name or
id, nothing for anything unusual, and nothing written."""

from __future__ import annotations

import os
from pathlib import Path

from devcell.api import apply as api
from devcell.store import cell_glance, migrations
from tests.conftest import db_fingerprint


def _applied(tmp_path: Path) -> Path:
    manifest = tmp_path / "cells.yaml"
    manifest.write_text("\n---\n".join(
        f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}}}\n"
        "spec: {backend: fake}" for name in ("api", "web")))
    state = tmp_path / "state"
    api.apply(state, [str(manifest)])
    return state


def test_the_schema_version_it_reads_is_the_latest() -> None:
    """A migration added moves migrations.LATEST: move cell_glance.SCHEMA_VERSION with it
    (until then, every exec takes the full path)."""
    assert cell_glance.SCHEMA_VERSION == migrations.LATEST


def test_a_cell_by_name_or_id_and_nothing_else(tmp_path: Path) -> None:
    state = _applied(tmp_path)
    before = db_fingerprint(state)
    found = cell_glance.cell(str(state), "api")
    assert found is not None
    assert (found.name, found.backend, found.phase, found.converged, found.deleting) == (
        "api", "fake", "Running", True, False)
    by_id = cell_glance.cell(str(state), found.id)
    assert by_id is not None and by_id.name == "api"
    assert cell_glance.cell(str(state), "ap") is None
    assert cell_glance.cell(str(state), "") is None
    assert cell_glance.cell(str(state), "b\udcffx") is None  # a non-UTF-8 argument
    assert cell_glance.cell(str(state) + "\udcff", "api") is None
    assert cell_glance.cell(str(tmp_path / "elsewhere"), "api") is None
    assert not (tmp_path / "elsewhere").exists()
    assert db_fingerprint(state) == before


def test_another_schema_version_or_a_damaged_file_is_left_to_the_full_path(
        tmp_path: Path) -> None:
    state = _applied(tmp_path)
    import sqlite3

    conn = sqlite3.connect(state / "state.db")
    conn.execute(f"PRAGMA user_version = {migrations.LATEST + 1}")
    conn.close()
    assert cell_glance.cell(str(state), "api") is None
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "state.db").write_bytes(b"not a database" * 100)
    assert cell_glance.cell(str(damaged), "api") is None
    odd = tmp_path / "a?b#c%d"
    os.rename(state, odd)
    conn = sqlite3.connect(odd / "state.db")
    conn.execute(f"PRAGMA user_version = {migrations.LATEST}")
    conn.close()
    found = cell_glance.cell(str(odd), "web")
    assert found is not None and found.name == "web"
