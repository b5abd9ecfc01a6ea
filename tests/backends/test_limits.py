"""Backend limits are checked at admission: what an engine could never run is refused with
file, line and field before anything is recorded, never late in a reconcile."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell import admission
from devcell.backends import limits
from devcell.errors import ManifestError
from devcell.manifests.model import SourceFile
from devcell.store.db import Database, open_database


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(tmp_path / "state")
    yield database
    database.close()


def source(text: str) -> list[SourceFile]:
    data = text.encode()
    return [SourceFile("m.yaml", "/m.yaml", data, hashlib.sha256(data).hexdigest())]


CELL = """apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {{name: {name}}}
spec:
  backend: {backend}
  image: devcell/busybox:latest
{extra}
---
"""
SNAPSHOT = """apiVersion: devcell.dev/v1alpha1
kind: Snapshot
metadata: {name: snap}
spec: {cell: base}
---
"""


def test_cpus_beyond_this_machine_are_refused_for_the_container_backend() -> None:
    top = limits.of("container").max_cpus
    assert top is not None
    spec = {"backend": "container", "resources": {"cpus": top + 1}}
    assert [p for p, _ in limits.cell_problems(spec, "container")] == [
        ("spec", "resources", "cpus")]
    assert list(limits.cell_problems({**spec, "resources": {"cpus": top}}, "container")) == []
    assert list(limits.cell_problems(spec, "fake")) == []  # the fake backend runs nothing


def test_reserved_paths_cover_what_lies_below_them() -> None:
    spec = {"workspace": {"mountPath": "/ws"}, "mounts": [{"mountPath": "/.dockerenv/x"}]}
    assert [p for p, _ in limits.cell_problems(spec, "container")] == [
        ("spec", "mounts", 0, "mountPath")]
    assert list(limits.cell_problems({"workspace": {"mountPath": "/.dockerenvs"}},
                                     "container")) == []


def test_a_fork_of_a_snapshot_defined_in_the_same_apply_by_another_backend(
        db: Database) -> None:
    fork = "  workspace: {from: {snapshot: snap}}"
    text = (CELL.format(name="base", backend="fake", extra="") + SNAPSHOT
            + CELL.format(name="boxed", backend="container", extra=fork))
    with pytest.raises(ManifestError) as refused:
        admission.apply(db, source(text))
    [problem] = refused.value.problems
    assert (problem.name, problem.field, problem.line) == (
        "boxed", "spec.workspace.from.snapshot", 20)
    assert "taken by the fake backend" in problem.message
    # the same fork on the snapshot's own backend is admitted
    same = (CELL.format(name="base", backend="fake", extra="") + SNAPSHOT
            + CELL.format(name="boxed", backend="fake", extra=fork))
    admission.apply(db, source(same), dry_run=True)


def test_spec_user_on_a_vm_cell_is_refused_with_its_line(db: Database) -> None:
    text = CELL.format(name="machine", backend="vm", extra="  user: \"1000:1000\"")
    with pytest.raises(ManifestError) as refused:
        admission.apply(db, source(text))
    [problem] = refused.value.problems
    assert (problem.field, problem.line) == ("spec.user", 7)
    assert "spec.user is for container cells" in problem.message
    admission.apply(db, source(CELL.format(name="boxed", backend="container",
                                           extra="  user: vscode")), dry_run=True)
