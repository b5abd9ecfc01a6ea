"""The fake backend: fault injection, its call log, and its honesty about snapshots."""

from __future__ import annotations

import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell import admission, errors
from devcell.backends import fake
from devcell.backends.base import CellRef, Consistency
from devcell.backends.fake import Failure, FakeBackend, parse_failures
from devcell.controllers.context import Context
from devcell.errors import BackendError
from devcell.reconciler.converge import converge
from devcell.store import objects, operations
from devcell.store.db import open_database
from tests.controllers.support import cell_doc, parse, snapshot_doc

API = CellRef("cell_fakeapi000000001", "api", {"backend": "fake"}, "vol_fakeapi000000001")
WEB = CellRef("cell_fakeweb000000001", "web", {"backend": "fake"}, "vol_fakeweb000000001")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("DEVCELL_FAKE_FAIL", raising=False)
    yield


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def make(state: Path, *failures: Failure) -> FakeBackend:
    return FakeBackend(state_dir=state, failures=list(failures))


# -- parse_failures --------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("", []),
    (" , ,", []),
    ("start", [Failure("start", None, None)]),
    ("start@api", [Failure("start", "api", None)]),
    ("start:2", [Failure("start", None, 2)]),
    ("start@api:1", [Failure("start", "api", 1)]),
    (" start@api:1 , checkpoint ,create_volume@web:3",
     [Failure("start", "api", 1), Failure("checkpoint", None, None),
      Failure("create_volume", "web", 3)]),
    ("start@api:perm", [Failure("start", "api", None, permanent=True)]),
    ("stop:perm,start:1", [Failure("stop", None, None, permanent=True),
                           Failure("start", None, 1)]),
])
def test_parse_failures(text: str, expected: list[Failure]) -> None:
    assert parse_failures(text) == expected


def test_failures_come_from_the_environment(state: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVCELL_FAKE_FAIL", "start@api:1,stop")
    backend = FakeBackend(state_dir=state)
    try:
        assert backend.failures == [Failure("start", "api", 1), Failure("stop", None, None)]
    finally:
        backend.close()
    explicit = FakeBackend(state_dir=state, failures=[])
    try:
        assert explicit.failures == []  # an explicit list wins over the environment
    finally:
        explicit.close()


# -- injected faults -------------------------------------------------------------------------


def test_counted_failure_fails_that_many_matching_calls_then_succeeds(state: Path) -> None:
    backend = make(state, Failure("start", "api", 2))
    try:
        backend.create(API, "h")
        backend.create(WEB, "h")
        for _ in range(2):
            with pytest.raises(BackendError, match="injected failure in step start"):
                backend.start(API)
            assert not backend.observe(API).running  # a failed call changes nothing
        backend.start(WEB)  # another cell is not affected and does not use up the count
        backend.start(API)
        assert backend.observe(API).running
        assert backend.failures[0].remaining == 0
        assert [c for c in backend.calls() if c[0] == "start"] == [
            ("start", "api", "injected-failure"), ("start", "api", "injected-failure"),
            ("start", "web", "ok"), ("start", "api", "ok")]
    finally:
        backend.close()


def test_uncounted_failure_without_cell_fails_every_call(state: Path) -> None:
    backend = make(state, Failure("create", None, None))
    try:
        for ref in (API, WEB, API):
            with pytest.raises(BackendError):
                backend.create(ref, "h")
        assert not backend.observe(API).exists and not backend.observe(WEB).exists
        backend.failures.clear()
        backend.create(API, "h")
        assert backend.observe(API).exists
    finally:
        backend.close()


def test_permanent_failure_fails_every_call_with_a_permanent_error(state: Path) -> None:
    backend = make(state, *parse_failures("start@api:perm"))
    try:
        backend.create(API, "h")
        backend.create(WEB, "h")
        for _ in range(3):  # never heals
            with pytest.raises(fake.InjectedPermanentFailure,
                               match="injected failure in step start") as raised:
                backend.start(API)
            assert errors.retry_delay(raised.value) is None  # terminal: not retried
            assert errors.condition_reason(raised.value) == "InjectedPermanentFailure"
        backend.start(WEB)
        assert not backend.observe(API).running and backend.observe(WEB).running
    finally:
        backend.close()


def test_counted_failure_stays_temporary(state: Path) -> None:
    backend = make(state, *parse_failures("start@api:1"))
    try:
        backend.create(API, "h")
        with pytest.raises(BackendError) as raised:
            backend.start(API)
        assert not isinstance(raised.value, fake.InjectedPermanentFailure)
        assert errors.retry_delay(raised.value) == 0.0  # the queue's backoff decides
    finally:
        backend.close()


def test_zero_count_never_fails(state: Path) -> None:
    backend = make(state, *parse_failures("start:0"))
    try:
        backend.create(API, "h")
        backend.start(API)
        assert backend.observe(API).running
    finally:
        backend.close()


@pytest.mark.parametrize("step", ["quiesce", "checkpoint", "resume", "stop", "delete",
                                  "create_volume"])
def test_every_cell_step_can_be_made_to_fail(state: Path, step: str) -> None:
    backend = make(state, Failure(step, "api", 1))
    try:
        backend.create(API, "h")
        backend.start(API)
        calls = {
            "quiesce": lambda: backend.quiesce(API),
            "checkpoint": lambda: backend.checkpoint(API, "snap_x"),
            "resume": lambda: backend.resume(API),
            "stop": lambda: backend.stop(API),
            "delete": lambda: backend.delete(API),
            "create_volume": lambda: backend.create_volume(API, "vol_x", from_checkpoint=None),
        }
        with pytest.raises(BackendError, match=step):
            calls[step]()
        assert backend.calls()[-1] == (step, "api", "injected-failure")
        assert backend.observe(API).running
        assert not backend.checkpoint_exists("snap_x") and not backend.volume_exists("vol_x")
        calls[step]()  # count used up
        assert backend.calls()[-1] == (step, "api", "ok")
    finally:
        backend.close()


def test_fault_named_like_the_recorded_step_fires(state: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVCELL_FAKE_FAIL", "create-volume@api")
    db = open_database(state)
    ctx = Context(db)
    try:
        result = admission.apply_objects(db, parse(cell_doc("api")))
        converge(ctx, result.to_reconcile)
        cell = objects.require(db.conn, "Cell", "api")
        op = operations.for_object(db.conn, cell.id)[0]
        assert operations.steps(db.conn, op["id"])[0].name == "create-volume"
        assert operations.steps(db.conn, op["id"])[0].status == "Failed"
    finally:
        ctx.close()
        db.close()


def test_volume_fault_can_target_a_cell(state: Path) -> None:
    backend = make(state, Failure("delete_volume", "api", None))
    try:
        backend.create_volume(API, API.volume_id or "", from_checkpoint=None)
        with pytest.raises(BackendError):
            backend.delete_volume(API.volume_id or "")
    finally:
        backend.close()


def test_counted_fault_from_the_environment_is_spent_once_per_process(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVCELL_FAKE_FAIL", "start@api:1")
    first = FakeBackend(state_dir=state)
    try:
        first.create(API, "h")
        with pytest.raises(BackendError):
            first.start(API)
    finally:
        first.close()
    second = FakeBackend(state_dir=state)
    try:
        second.start(API)  # the one failure allowed in this process has happened
        assert second.observe(API).running
    finally:
        second.close()


# -- the call log ----------------------------------------------------------------------------


def test_call_log_records_every_mutating_call_in_order(state: Path) -> None:
    backend = make(state)
    try:
        assert backend.calls() == []
        backend.observe(API)
        backend.volume_exists("vol_x")
        backend.checkpoint_exists("snap_x")
        assert backend.calls() == []  # reads are not logged
        backend.create_volume(API, "vol_a", from_checkpoint=None)
        backend.create(API, "h")
        backend.start(API)
        backend.quiesce(API)
        backend.checkpoint(API, "snap_a")
        backend.resume(API)
        backend.stop(API)
        backend.delete(API)
        backend.delete_volume("vol_a")
        backend.delete_checkpoint("snap_a")
        assert backend.calls() == [
            ("create_volume", "api", "ok"), ("create", "api", "ok"), ("start", "api", "ok"),
            ("quiesce", "api", "ok"), ("checkpoint", "api", "ok"), ("resume", "api", "ok"),
            ("stop", "api", "ok"), ("delete", "api", "ok"), ("delete_volume", "api", "ok"),
            ("delete_checkpoint", "api", "ok")]
    finally:
        backend.close()


def test_call_log_is_shared_through_the_state_dir(state: Path) -> None:
    first, second = make(state), make(state)
    try:
        first.create(API, "h")
        assert second.calls() == [("create", "api", "ok")]
    finally:
        first.close()
        second.close()


def test_fake_files_are_private(state: Path) -> None:
    backend = make(state)
    try:
        backend.create(API, "h")
        directory = state / "backends"
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        for path in directory.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    finally:
        backend.close()


# -- honesty ---------------------------------------------------------------------------------


def test_fake_claims_no_files_and_metadata_snapshots(state: Path) -> None:
    caps = FakeBackend.capabilities
    assert not caps.workspace_files and not caps.memory_state and not caps.block_diff
    assert caps.snapshot_consistency is Consistency.METADATA
    backend = make(state)
    try:
        info = backend.checkpoint(API, "snap_a")
        assert info.consistency is Consistency.METADATA and str(info.consistency) == "metadata"
        assert info.ref == "fake://snap_a"
        assert (info.size_bytes, info.files) == (0, 0)  # no files were copied
    finally:
        backend.close()


def test_snapshots_taken_through_the_fake_report_metadata(state: Path) -> None:
    db = open_database(state)
    ctx = Context(db)
    try:
        result = admission.apply_objects(db, parse(cell_doc("api"), snapshot_doc("snap", "api")))
        assert converge(ctx, result.to_reconcile).ok
        snap = objects.require(db.conn, "Snapshot", "snap")
        assert snap.extra["consistency"] == "metadata"
        assert snap.status["checkpoint"]["consistency"] == "metadata"
        from devcell.store import views

        rows = views.snapshots_table(db.conn, [])
        assert [(r["name"], r["consistency"]) for r in rows] == [("snap", "metadata")]
    finally:
        ctx.close()
        db.close()


def test_a_locked_database_is_recognised_by_its_result_code(tmp_path: Path) -> None:
    """The fake waits for a lock by SQLite's result code, not by the wording of the message."""
    holder = sqlite3.connect(tmp_path / "x.db", timeout=0)
    holder.execute("CREATE TABLE t (x)")
    holder.commit()
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(tmp_path / "x.db", timeout=0)
    try:
        with pytest.raises(sqlite3.OperationalError) as locked:
            other.execute("PRAGMA journal_mode = WAL")
    finally:
        other.close()
        holder.close()
    memory = sqlite3.connect(":memory:")
    with pytest.raises(sqlite3.OperationalError) as missing:
        memory.execute("SELECT * FROM nowhere")
    memory.close()
    assert fake._busy(locked.value) and not fake._busy(missing.value)
    assert not fake._busy(sqlite3.OperationalError("database is locked"))  # not from SQLite


def test_observe_all_reads_a_database_whose_schema_is_not_made_yet_as_empty(
        tmp_path: Path) -> None:
    """A reader racing the backend's first open sees the file before its tables."""
    (tmp_path / "backends").mkdir()
    sqlite3.connect(tmp_path / "backends" / "fake.db").execute("PRAGMA user_version = 0").close()
    assert (tmp_path / "backends" / "fake.db").exists()

    assert fake.observe_all(tmp_path) == {}
