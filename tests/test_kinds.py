"""The registry of kinds holds together: every entry's schema, table, columns, controller,
owner and wake-ups exist, so adding a kind that forgets one of them fails here, not at run
time."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from devcell import ids, kinds, schemas
from devcell.store.db import open_database

ALL = list(kinds.KINDS.values())


def _columns(tmp_path: Path, table: str) -> set[str]:
    db = open_database(tmp_path / "state")
    try:
        return {row[1] for row in db.conn.execute(f"PRAGMA table_info({table})")}
    finally:
        db.close()


@pytest.mark.parametrize("kind", ALL, ids=lambda k: k.name)
def test_each_kind_has_its_schema_table_and_controller(kind: kinds.Kind, tmp_path: Path) -> None:
    assert schemas.schema(kind.name)["properties"]["kind"]["const"] == kind.name
    columns = _columns(tmp_path, kind.table)
    assert {"id", "name", "spec", "generation", "observed_generation", "phase"} <= columns
    assert {column for column, _ in kind.listed} <= columns
    module, _, attr = kind.controller.partition(":")
    controller = getattr(importlib.import_module(module), attr)()
    for method in ("decide", "run_step", "after_step", "note_outputs", "rebuild_plan", "finish"):
        assert callable(getattr(controller, method, None)), method
    assert controller.kind == kind.name
    assert f"{kind.id_prefix}_" in ids.ID_PREFIXES


@pytest.mark.parametrize("kind", ALL, ids=lambda k: k.name)
def test_owners_and_wake_ups_name_real_kinds_and_columns(kind: kinds.Kind, tmp_path: Path) -> None:
    if kind.owner is not None:
        owner, column = kind.owner
        assert owner in kinds.KINDS
        assert column in _columns(tmp_path, kind.table)
    for wakes in kind.wakes:
        dependent = kinds.get(wakes.kind)
        columns = _columns(tmp_path, dependent.table)
        assert wakes.via in columns
        assert wakes.waiting_while_null is None or wakes.waiting_while_null in columns


def test_words_a_user_types_map_to_one_kind_each() -> None:
    seen: dict[str, str] = {}
    for kind in ALL:
        for word in (kind.singular, kind.plural, *kind.short_names):
            assert seen.setdefault(word, kind.name) == kind.name, word
            assert kinds.by_word(word) is kind
            assert kinds.by_word(word.upper()) is kind
    assert kinds.by_word("nope") is None


def test_kinds_are_in_dependency_order() -> None:
    """An owner comes before what it owns (recording and live_keys rely on the order)."""
    order = list(kinds.KINDS)
    for kind in ALL:
        if kind.owner is not None:
            assert order.index(kind.owner[0]) < order.index(kind.name)
