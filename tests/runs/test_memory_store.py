"""The in-memory store hands back what it was given: the same objects, unchecked."""

from __future__ import annotations

from devcell.runs import create_in_memory_snapshot_store
from tests.runs.helpers import make_snapshot


def test_returns_the_object_as_stored() -> None:
    store = create_in_memory_snapshot_store()
    snapshot = make_snapshot()
    store.save(snapshot)
    assert store.load(snapshot.run_id) is snapshot


def test_does_not_validate() -> None:
    """What a persistent store would refuse (not JSON, wrong status) is kept as it is."""
    store = create_in_memory_snapshot_store()
    odd = make_snapshot(plan=[{1, 2}], status="running")  # suspended_at: checked at construction
    store.save(odd)
    assert store.load(odd.run_id) is odd
