"""The cells among some ids that are built from a Dockerfile (spec.build), read in one query:
what `apply` and `diff` judge for a change of the build's inputs (devcell.api.build_inputs),
without reading every cell an apply names."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from devcell.records import Record
from devcell.store import faults


class BuiltCell(Record):
    id: str
    name: str
    backend: str
    spec: dict[str, Any]
    status: dict[str, Any]
    source: str | None
    settled: bool
    """Its last reconcile saw this generation and did not fail: the recorded image is what
    its runtime runs."""
    state: str = "Running"
    """The state it is to be in: its runtime hold's (store/holds.py), else its spec's."""


def among(conn: sqlite3.Connection, cell_ids: Iterable[str]) -> list[BuiltCell]:
    """The live, not-deleting cells among `cell_ids` with a spec.build, spec.features or a
    sidecar's build (in chunks)."""
    ids = sorted(set(cell_ids))
    out: list[BuiltCell] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for r in conn.execute(
            "SELECT id, name, backend, spec, status, source, generation, observed_generation, "
            "phase, COALESCE(json_extract(held, '$.state'), json_extract(spec, '$.state'), "
            "'Running') FROM cells WHERE deleted_at IS NULL AND deleting_at IS NULL "
            "AND (json_extract(spec, '$.build') IS NOT NULL "
            "OR COALESCE(json_array_length(spec, '$.features'), 0) > 0 "
            "OR EXISTS (SELECT 1 FROM json_each(spec, '$.sidecars') "
            "WHERE json_extract(value, '$.build') IS NOT NULL)) "
            f"AND id IN ({','.join('?' for _ in chunk)})", chunk,
        ):
            out.append(BuiltCell(r[0], r[1], r[2] or "", faults.loads(r[3] or "{}"),
                                 faults.loads(r[4] or "{}"), r[5],
                                 r[6] == r[7] and r[8] != "Failed", str(r[9])))
    return out
