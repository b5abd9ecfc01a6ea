"""Fixtures for the library verbs (devcell.api): manifest files, hooks that record what a verb
showed and when, and a stand-in for the daemon that holds the lease."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcell.api.converging import Hooks
from devcell.api.reports import Recorded
from devcell.controllers.context import Context
from devcell.reconciler import converge
from devcell.store import desired, operations
from devcell.store.db import Database, open_database


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def write(tmp_path: Path) -> Any:
    """write(name, *docs) -> the path of a manifest file holding the documents."""
    def make(name: str, *docs: dict[str, Any]) -> str:
        path = tmp_path / "manifests" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs))
        return str(path)
    return make


class Seen:
    """Hooks that note what a verb handed back, in order: ("recorded", Recorded) when its
    changes are recorded, "inline" when it starts converging in this process."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def hooks(self) -> Hooks:
        return Hooks(on_recorded=self._recorded, inline=self._inline)

    def _recorded(self, recorded: Recorded) -> None:
        self.events.append(("recorded", recorded))

    @contextmanager
    def _inline(self) -> Iterator[None]:
        self.events.append("inline")
        yield

    @property
    def names(self) -> list[str]:
        return [e if isinstance(e, str) else e[0] for e in self.events]


@pytest.fixture
def seen() -> Seen:
    return Seen()


class StandIn:
    """Reconciles what a verb recorded on another thread, as the daemon holding the lease
    would: use `hook` as the verb's on_recorded."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.threads: list[threading.Thread] = []

    def hook(self, recorded: Recorded) -> None:
        keys = desired.ApplyResult(list(recorded.changes)).to_reconcile
        thread = threading.Thread(target=self._run, args=(keys,))
        thread.start()
        self.threads.append(thread)

    def _run(self, keys: list[tuple[str, str]]) -> None:
        db = Database(self.state_dir)
        ctx = Context(db, trigger="test")
        try:
            keys = keys + operations.approved_keys(db.conn)
            converge.converge(ctx, keys, timeout=30)
        finally:
            ctx.close()
            db.close()

    def join(self) -> None:
        for thread in self.threads:
            thread.join(30)


@pytest.fixture
def stand_in(state: Path) -> Iterator[StandIn]:
    daemon = StandIn(state)
    yield daemon
    daemon.join()


def dirty_workspaces(state_dir: Path) -> None:
    """Someone edits every fake workspace: deleting its cell now needs approval."""
    conn = sqlite3.connect(state_dir / "backends" / "fake.db")
    conn.execute("UPDATE volumes SET writes = writes + 1")
    conn.commit()
    conn.close()


def suspended(state_dir: Path) -> sqlite3.Row:
    db = open_database(state_dir)
    try:
        row = db.conn.execute("SELECT * FROM operations WHERE status = 'Suspended'").fetchone()
        assert row is not None
        return row
    finally:
        db.close()
