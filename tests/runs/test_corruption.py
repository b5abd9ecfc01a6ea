"""The corruption matrix: every damaged snapshot raises CORRUPT_SNAPSHOT, with path and reason.

Each case runs against both persistent adapters (the file store and the SQLite store) through
their public `load`; a few run over every bit of an encoded snapshot.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from devcell.runs import SnapshotStore, StorageError, envelope
from tests.runs.helpers import location, make_snapshot, read_raw, write_raw

RUN_ID = "op_0001"


def reseal(payload: dict[str, Any]) -> bytes:
    """An envelope whose checksum is right for `payload`: only the checks after it can object."""
    body = envelope.canonical(payload)
    return b'{"checksum":"' + envelope.checksum_of(body).encode() + b'","snapshot":' + body + b"}"


def payload_with(**changes: Any) -> dict[str, Any]:
    payload = make_snapshot(RUN_ID).to_dict()
    payload.update(changes)
    return payload


def flip_bit(data: bytes, index: int, bit: int = 0) -> bytes:
    return data[:index] + bytes([data[index] ^ (1 << bit)]) + data[index + 1:]


def _in_plan_id(data: bytes) -> int:
    return data.index(b"plan_7f3a") + 5


# name -> (how to damage the valid bytes, what the reason must say)
CASES: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "empty": (lambda d: b"", "empty"),
    "truncated to one byte": (lambda d: d[:1], "not valid JSON"),
    "truncated in half": (lambda d: d[:len(d) // 2], "not valid JSON"),
    "truncated before the last brace": (lambda d: d.rstrip()[:-1], "not valid JSON"),
    "flipped bit in a value": (lambda d: flip_bit(d, _in_plan_id(d)), "checksum mismatch"),
    "flipped bit in the structure": (lambda d: flip_bit(d, 0, 3), "not valid JSON"),
    "flipped high bit (invalid UTF-8)": (lambda d: flip_bit(d, _in_plan_id(d), 7),
                                         "not valid UTF-8"),
    "invalid UTF-8 sequence": (lambda d: d.replace(b"plan_7f3a", b"plan_\xc3\x28"),
                               "not valid UTF-8"),
    "valid JSON, a list": (lambda d: b"[1, 2, 3]", "wrong shape"),
    "valid JSON, another object": (lambda d: b'{"hello": "world"}', "wrong shape"),
    "valid JSON, checksum not a sha256": (
        lambda d: d.replace(b'"sha256:', b'"md5:'), "wrong shape"),
    "valid JSON, snapshot missing fields": (lambda d: reseal({"version": 1}), "wrong shape"),
    "valid JSON, non-scalar output": (
        lambda d: reseal(payload_with(completedSteps=[{"stepId": "q", "outputs": {"x": [1]}}])),
        "completedSteps[0].outputs.x"),
    "valid JSON, unknown field": (lambda d: reseal(payload_with(extra=1)), "wrong shape"),
    "valid JSON, bad timestamp": (lambda d: reseal(payload_with(suspendedAt="yesterday")),
                                  "suspendedAt"),
    "wrong version": (lambda d: reseal(payload_with(version=2)), "unsupported format version 2"),
    "version not a number": (lambda d: reseal(payload_with(version="1")), "wrong shape"),
    "checksum mismatch": (
        lambda d: d.replace(d[d.index(b"sha256:") + 7:][:8], b"00000000", 1),
        "checksum mismatch"),
    "checksum of other content": (
        lambda d: d.replace(b"plan_7f3a", b"plan_7f3b"), "checksum mismatch"),
    "runId mismatch": (lambda d: reseal(payload_with(runId="op_other")),
                       "runId 'op_other' does not match"),
    "wrong status": (lambda d: reseal(payload_with(status="running")),
                     "status is 'running', expected 'suspended'"),
    "same step completed twice": (
        lambda d: reseal(payload_with(completedSteps=[{"stepId": "q", "outputs": {}}] * 2)),
        "records step 'q' twice"),
    "resume schema not a schema": (lambda d: reseal(payload_with(resumeSchema={"type": 5})),
                                   "resumeSchema is not a valid JSON Schema"),
    "duplicate key": (lambda d: d.replace(b'{"checksum":', b'{"checksum":"x","checksum":', 1),
                      "duplicate key 'checksum'"),
    "NaN": (lambda d: d.replace(b'"snapshot":{', b'"snapshot":{"x":NaN,', 1), "NaN"),
    "nested too deeply": (lambda d: b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "number too large for JSON": (
        lambda d: d.replace(b'"snapshot":{', b'"snapshot":{"x":1e999,', 1), "cannot represent"),
    "oversized": (lambda d: b" " * (envelope.MAX_BYTES + 1), "byte limit"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_corrupt_snapshot_is_refused(persistent_store: SnapshotStore, case: str) -> None:
    damage, expected_reason = CASES[case]
    persistent_store.save(make_snapshot(RUN_ID))
    write_raw(persistent_store, RUN_ID, damage(read_raw(persistent_store, RUN_ID)))
    with pytest.raises(StorageError) as info:
        persistent_store.load(RUN_ID)
    error = info.value
    assert error.code == StorageError.CORRUPT_SNAPSHOT
    assert error.path == location(persistent_store, RUN_ID)
    assert expected_reason in error.reason
    assert error.path in str(error) and error.reason in str(error)


def test_snapshot_stored_under_another_run_is_refused(persistent_store: SnapshotStore) -> None:
    persistent_store.save(make_snapshot("op_other"))
    write_raw(persistent_store, RUN_ID, read_raw(persistent_store, "op_other"))
    with pytest.raises(StorageError) as info:
        persistent_store.load(RUN_ID)
    assert info.value.code == StorageError.CORRUPT_SNAPSHOT
    assert info.value.path == location(persistent_store, RUN_ID)
    assert "runId 'op_other' does not match" in info.value.reason
    assert persistent_store.load("op_other") == make_snapshot("op_other")


def test_corruption_of_one_run_does_not_affect_another(persistent_store: SnapshotStore) -> None:
    persistent_store.save(make_snapshot(RUN_ID))
    persistent_store.save(make_snapshot("op_other"))
    write_raw(persistent_store, RUN_ID, b"garbage")
    assert persistent_store.load("op_other") == make_snapshot("op_other")
    with pytest.raises(StorageError):
        persistent_store.load(RUN_ID)
    persistent_store.save(make_snapshot(RUN_ID))  # a save repairs it
    assert persistent_store.load(RUN_ID) == make_snapshot(RUN_ID)


def test_every_single_bit_flip_is_detected() -> None:
    """Any one bit of an encoded snapshot flipped: refused as corrupt, never loaded changed."""
    snapshot = make_snapshot(RUN_ID)
    data = envelope.encode(snapshot, where="<test>")
    original = json.dumps(snapshot.to_dict(), sort_keys=True)
    unchanged = 0
    for index in range(len(data)):
        for bit in range(8):
            try:
                loaded = envelope.decode(flip_bit(data, index, bit), run_id=RUN_ID, where="<t>")
            except StorageError as exc:
                assert exc.code == StorageError.CORRUPT_SNAPSHOT and exc.reason, (index, bit)
            else:  # only acceptable if the flip did not change what the snapshot says
                assert json.dumps(loaded.to_dict(), sort_keys=True) == original, (index, bit)
                unchanged += 1
    assert unchanged == 0


def test_random_bit_flips_through_the_stores(persistent_store: SnapshotStore) -> None:
    snapshot = make_snapshot(RUN_ID)
    persistent_store.save(snapshot)
    good = read_raw(persistent_store, RUN_ID)
    rng = random.Random(5)
    for _ in range(64):
        index = rng.randrange(len(good.rstrip()))
        write_raw(persistent_store, RUN_ID, flip_bit(good, index, rng.randrange(8)))
        with pytest.raises(StorageError) as info:
            persistent_store.load(RUN_ID)
        assert info.value.code == StorageError.CORRUPT_SNAPSHOT
        assert info.value.path == location(persistent_store, RUN_ID)


def test_sqlite_value_of_the_wrong_type(tmp_path: Any) -> None:
    from devcell.runs import create_sqlite_snapshot_store

    store = create_sqlite_snapshot_store(path=tmp_path / "runs.db")
    store.save(make_snapshot(RUN_ID))
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        conn.execute("UPDATE run_snapshots SET envelope = 42")
    with pytest.raises(StorageError) as info:
        store.load(RUN_ID)
    assert info.value.code == StorageError.CORRUPT_SNAPSHOT
    assert info.value.path == f"{tmp_path / 'runs.db'}#{RUN_ID}"
    assert "integer" in info.value.reason
    store.close()


def test_sqlite_text_value_is_read_as_its_bytes(tmp_path: Any) -> None:
    from devcell.runs import create_sqlite_snapshot_store

    store = create_sqlite_snapshot_store(path=tmp_path / "runs.db")
    store.save(make_snapshot(RUN_ID))
    data = read_raw(store, RUN_ID)
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        conn.execute("UPDATE run_snapshots SET envelope = ?", (data.decode(),))
    assert store.load(RUN_ID) == make_snapshot(RUN_ID)
    with sqlite3.connect(tmp_path / "runs.db") as conn:  # TEXT holding invalid UTF-8
        conn.execute("UPDATE run_snapshots SET envelope = CAST(? AS TEXT)", (b"\xff\xfe",))
    with pytest.raises(StorageError) as info:
        store.load(RUN_ID)
    assert info.value.code == StorageError.CORRUPT_SNAPSHOT
    assert "not valid UTF-8" in info.value.reason
    store.close()


def test_a_cut_snapshot_is_called_truncated_and_a_garbled_one_is_not(
        persistent_store: SnapshotStore) -> None:
    persistent_store.save(make_snapshot(RUN_ID))
    data = read_raw(persistent_store, RUN_ID)
    reasons = {}
    for name, damaged in (("cut", data.rstrip()[:-1]),
                          ("garbled", data[:10] + b"#" + data[11:])):
        write_raw(persistent_store, RUN_ID, damaged)
        with pytest.raises(StorageError) as info:
            persistent_store.load(RUN_ID)
        reasons[name] = info.value.reason
    assert "truncated?" in reasons["cut"]
    assert "not valid JSON" in reasons["garbled"] and "truncated" not in reasons["garbled"]
