"""Property tests: whatever a snapshot holds, saving then loading gives it back exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from devcell.runs import RunSnapshot, SnapshotStore, envelope
from tests.runs import strategies
from tests.runs.helpers import ADAPTERS, make_store

PROPERTY_SETTINGS = settings(max_examples=60, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


def _exact(snapshot: RunSnapshot) -> str:
    # == would let True stand for 1 and 1.0 for 1; the canonical JSON tells them apart.
    return json.dumps(snapshot.to_dict(), sort_keys=True)


@pytest.fixture(scope="module", params=ADAPTERS)
def shared_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[SnapshotStore]:
    # One store for all examples (opening a database per example would dominate the run time);
    # each example saves before it loads, so earlier examples cannot leak into its result.
    store = make_store(request.param, tmp_path_factory.mktemp(f"prop-{request.param}"))
    yield store
    store.close()


@PROPERTY_SETTINGS
@given(first=strategies.snapshots(), second=strategies.snapshots())
def test_save_load_round_trip(shared_store: SnapshotStore, first: RunSnapshot,
                              second: RunSnapshot) -> None:
    shared_store.save(first)
    loaded = shared_store.load(first.run_id)
    assert loaded == first
    assert loaded is not None and _exact(loaded) == _exact(first)
    # overwrite with a different snapshot under the same id
    moved = RunSnapshot(**{**vars(second), "run_id": first.run_id})
    shared_store.save(moved)
    reloaded = shared_store.load(first.run_id)
    assert reloaded is not None and _exact(reloaded) == _exact(moved)
    shared_store.delete(first.run_id)
    assert shared_store.load(first.run_id) is None


@PROPERTY_SETTINGS
@given(snapshot=strategies.snapshots())
def test_encoding_is_canonical_and_decodes_to_the_same_snapshot(snapshot: RunSnapshot) -> None:
    data = envelope.encode(snapshot, where="<test>")
    assert envelope.encode(snapshot, where="<test>") == data  # deterministic
    decoded = envelope.decode(data, run_id=snapshot.run_id, where="<test>")
    assert _exact(decoded) == _exact(snapshot)
    # the stored snapshot is exactly the canonical bytes the checksum covers
    document = json.loads(data)
    assert document["checksum"] == envelope.checksum_of(envelope.canonical(document["snapshot"]))


@PROPERTY_SETTINGS
@given(snapshot=strategies.snapshots())
def test_dict_round_trip(snapshot: RunSnapshot) -> None:
    assert RunSnapshot.from_dict(snapshot.to_dict()) == snapshot
