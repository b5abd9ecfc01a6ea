"""Applies racing each other never break a rule that depends on recorded state: every rule is
checked inside the write transaction. Processes apply conflicting manifests at random (a
snapshot of one cell or of another, a cell on one backend or another, all at once); whatever
the interleaving, the recorded state is one that an accepted apply described, immutable
fields keep the value of the first accepted apply, and every other apply was refused."""

from __future__ import annotations

import multiprocessing
import random
import traceback
from pathlib import Path
from typing import Any

from devcell import admission
from devcell.errors import ManifestError
from devcell.store import objects
from devcell.store.db import open_database
from tests.controllers.support import cell_doc, parse, snapshot_doc

PROCESSES = 6
ROUNDS = 8


def _contender(state: str, worker: int, rounds: list[list[str]], start: Any, results: Any
               ) -> None:
    try:
        db = open_database(Path(state))
        outcomes = []
        for r, choices in enumerate(rounds):
            start[r].wait(30)
            cell_for_snapshot, backend = choices[worker].split(":")
            docs = [cell_doc(f"box{r}", backend=backend, image="devcell/busybox:latest"),
                    snapshot_doc(f"snap{r}", cell_for_snapshot)]
            try:
                admission.apply_objects(db, parse(*docs))
                outcomes.append((r, choices[worker], "accepted"))
            except ManifestError as exc:
                outcomes.append((r, choices[worker], f"refused: {exc}"))
        db.close()
        results.put((worker, outcomes))
    except BaseException:
        results.put((worker, traceback.format_exc()))


def test_racing_applies_never_change_an_immutable_field(tmp_path: Path) -> None:
    state = tmp_path / "state"
    db = open_database(state)
    admission.apply_objects(db, parse(cell_doc("a"), cell_doc("b")))
    db.close()
    rng = random.Random(20261130)
    rounds = [[f"{rng.choice('ab')}:{rng.choice(['fake', 'container'])}"
               for _ in range(PROCESSES)] for _ in range(ROUNDS)]
    mp = multiprocessing.get_context("forkserver")
    start = [mp.Event() for _ in range(ROUNDS)]
    results = mp.Queue()
    procs = [mp.Process(target=_contender, args=(str(state), n, rounds, start, results))
             for n in range(PROCESSES)]
    try:
        for p in procs:
            p.start()
        for event in start:
            event.set()
        reports = [results.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    failures = [r for r in reports if isinstance(r[1], str)]
    assert not failures, failures
    db = open_database(state)
    try:
        for r in range(ROUNDS):
            outcomes = [o for _, worker in reports for o in worker if o[0] == r]
            accepted = {choice for _, choice, what in outcomes if what == "accepted"}
            snap = objects.require(db.conn, "Snapshot", f"snap{r}")
            box = objects.require(db.conn, "Cell", f"box{r}")
            recorded = f"{snap.spec['cell']}:{box.spec['backend']}"
            # Only applies that described the recorded state were accepted: the first one
            # recorded it, the rest found it unchanged; every other one was refused.
            assert accepted == {recorded}, (r, outcomes, recorded)
            for _, choice, what in outcomes:
                if choice != recorded:
                    assert "immutable" in what, (r, choice, what)
            assert box.extra["backend"] == box.spec["backend"]
    finally:
        db.close()
