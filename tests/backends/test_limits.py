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



def test_user_env_probe_on_a_vm_cell_is_refused_with_its_line(db: Database) -> None:
    text = CELL.format(name="machine", backend="vm", extra="  userEnvProbe: loginShell")
    with pytest.raises(ManifestError) as refused:
        admission.apply(db, source(text))
    [problem] = refused.value.problems
    assert (problem.field, problem.line) == ("spec.userEnvProbe", 7)
    assert "spec.userEnvProbe is for container cells" in problem.message
    admission.apply(db, source(CELL.format(name="quiet", backend="vm",
                                           extra="  userEnvProbe: none")), dry_run=True)

def _refused(db: Database, extra: str) -> list[tuple[str | None, int | None, str]]:
    with pytest.raises(ManifestError) as refused:
        admission.apply(db, source(CELL.format(name="machine", backend="vm", extra=extra)))
    return [(p.field, p.line, p.message) for p in refused.value.problems]


def test_what_a_vm_cell_cannot_publish_is_refused_naming_the_field(db: Database) -> None:
    """Host networking, an IPv6 host address and ports on the Firecracker driver: each
    refused at apply with its file, line and field (issue 30 item 5)."""
    host = _refused(db, "  network: {mode: host}")  # the security policy refuses it too
    assert ("spec.network.mode", 7, "the vm backend does not run network mode host (its "
            "cells run none or bridge; host networking is for container cells)") in host
    six = "  network:\n    mode: bridge\n    ports:\n      - {containerPort: 80, hostIP: \"::1\"}"
    [(field, line, message)] = _refused(db, six)
    assert (field, line) == ("spec.network.ports[0].hostIP", 10)
    assert "IPv4 addresses only" in message
    firecracker = ("  vm: {driver: firecracker}\n  network:\n    mode: bridge\n    ports:\n"
                   "      - {containerPort: 80, hostPort: 18080}")
    [(field, line, message)] = _refused(db, firecracker)
    assert (field, line) == ("spec.network.ports", 11)  # where its list begins
    assert "firecracker driver publishes no ports" in message
    published = "  network:\n    mode: bridge\n    ports:\n      - {containerPort: 80}"
    admission.apply(db, source(CELL.format(name="machine", backend="vm", extra=published)),
                    dry_run=True)
    admission.apply(db, source(CELL.format(name="boxed", backend="container", extra=six)),
                    dry_run=True)
