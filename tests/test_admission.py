"""Admission's host-port rule (devcell.admission.port_problems) and `cell fork`'s ports.

A fork copied its parent's hostPort, the engine refused "port is already allocated", and the
fork was left Failed and retried by the daemon for ever; validation compared ports only inside
one cell. The property: whatever sequence of applies, edits and deletes is admitted, no
admitted state holds two live cells that publish one host address and port.
"""

from __future__ import annotations

import ipaddress
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcell import admission, security
from devcell.api import cells
from devcell.api.converging import Options
from devcell.errors import ManifestError
from devcell.manifests.loader import read_sources
from devcell.store import desired, objects
from devcell.store.db import open_database

ADDRESSES = ["127.0.0.1", "127.0.0.2", "0.0.0.0", "::1", "::"]
NAMES = ["a", "b", "c", "d"]


def _cell(name: str, ports: list[tuple[str, int]]) -> dict[str, Any]:
    return {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": name},
            "spec": {"backend": "fake", "network": {"mode": "bridge", "ports": [
                {"containerPort": 80 + i, "hostPort": port, "hostIP": address}
                for i, (address, port) in enumerate(ports)]}}}


def _clash(a: tuple[str, int], b: tuple[str, int]) -> bool:
    """Independent of the code under test: one port, and addresses that share a binding."""
    if a[1] != b[1]:
        return False
    x, y = ipaddress.ip_address(a[0]), ipaddress.ip_address(b[0])
    if x == y:
        return True
    if any(ip.is_unspecified and ip.version == 6 for ip in (x, y)):
        return True  # :: is dual-stack on Linux
    return x.version == y.version and (x.is_unspecified or y.is_unspecified)


PORTS = st.lists(st.tuples(st.sampled_from(ADDRESSES), st.sampled_from([8080, 8081])),
                 max_size=2, unique=True)
STEP = st.one_of(
    st.tuples(st.just("apply"), st.dictionaries(st.sampled_from(NAMES), PORTS, min_size=1,
                                                max_size=3)),
    st.tuples(st.just("delete"), st.sampled_from(NAMES)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=1, max_size=6))
def test_no_admitted_state_holds_two_cells_on_one_host_port(steps: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(Path(tmp) / "state")
        (Path(tmp) / "state" / "config.yaml").write_text(
            "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
            "security: {allowedPublishAddresses: ['0.0.0.0', '::', '127.0.0.2']}\n")
        (Path(tmp) / "state" / "config.yaml").chmod(0o600)
        try:
            for i, (what, arg) in enumerate(steps):
                if what == "delete":
                    if objects.get(db.conn, "Cell", arg) is not None:
                        desired.delete(db, "Cell", arg)
                        db.conn.execute("UPDATE cells SET deleted_at = 'now' WHERE name = ?",
                                        (arg,))  # the fake's delete, done
                    continue
                path = Path(tmp) / f"m{i}.yaml"
                docs = [_cell(name, ports) for name, ports in arg.items()]
                if any(len({p for p in ports}) != len(ports) or any(
                        _clash(x, y) for j, x in enumerate(ports) for y in ports[j + 1:])
                       for ports in arg.values()):
                    continue  # inside one cell: the security rule's (tested there)
                path.write_text("---\n".join(yaml.safe_dump(d) for d in docs))
                try:
                    admission.apply(db, read_sources([str(path)]))
                except ManifestError as exc:
                    assert any("is already published by cell" in str(p) for p in exc.problems)
            live = {name: security.published(held.spec)
                    for name, held in objects.cells_publishing_ports(db.conn).items()
                    if not held.deleting}
            for a in live:
                for b in live:
                    if a < b:
                        assert not any(_clash(x, y) for x in live[a] for y in live[b]), (a, b)
        finally:
            db.close()


def _forked(state: Path, tmp_path: Path) -> None:
    """Cell `api` publishing 8080 with a Ready snapshot `s1`, converged on the fake backend."""
    path = tmp_path / "api.yaml"
    path.write_text(yaml.safe_dump(_cell("api", [("127.0.0.1", 8080)])) + "---\n" + yaml.safe_dump(
        {"apiVersion": "devcell.dev/v1alpha1", "kind": "Snapshot", "metadata": {"name": "s1"},
         "spec": {"cell": "api"}}))
    from devcell.api import apply as api_apply

    api_apply.apply(state, [str(path)])


def test_a_fork_of_a_cell_publishing_a_port_is_refused_naming_it_then_forked_elsewhere(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    _forked(state, tmp_path)
    with pytest.raises(ManifestError) as refused:
        cells.fork(state, "api", snapshot="s1", name="exp")
    assert 'already published by cell "api"' in str(refused.value.problems[0])
    with pytest.raises(ManifestError, match="publishes no container port 9"):
        cells.fork(state, "api", snapshot="s1", name="exp", host_ports={9: 19000})
    cells.fork(state, "api", snapshot="s1", name="exp", host_ports={80: 18080},
               options=Options(timeout=60))
    cells.fork(state, "api", snapshot="s1", name="quiet", publish=False,
               options=Options(timeout=60))
    db = open_database(state)
    try:
        published = {n: security.published(held.spec)
                     for n, held in objects.cells_publishing_ports(db.conn).items()}
        assert published == {"api": [("127.0.0.1", 8080)], "exp": [("127.0.0.1", 18080)]}
        assert objects.require(db.conn, "Cell", "quiet").phase == "Running"
    finally:
        db.close()


def test_the_engines_port_refusal_is_permanent_with_its_reason() -> None:
    import docker.errors

    from devcell.backends.container import sdk
    from devcell.errors import BackendRefused

    class Response:
        status_code = 500
        reason = "Internal Server Error"

    exc = docker.errors.APIError(
        "500 Server Error", response=Response(),  # type: ignore[arg-type]
        explanation="driver failed programming external connectivity on endpoint x: Bind for "
                    "127.0.0.1:8080 failed: port is already allocated")
    translated = sdk.translate(exc, "starting cell exp")
    assert isinstance(translated, BackendRefused) and translated.permanent
    assert "port is already allocated" in str(translated) and "another hostPort" in str(translated)


def test_a_port_moved_from_one_file_to_another_is_one_prune_not_a_refusal(
        tmp_path: Path) -> None:
    """`a.yaml` (cell a on 8080) removed and `b.yaml` (cell b on 8080) added: an `apply
    --prune` of the directory held a's port against b and refused the whole directory (the
    daemon, which prunes only once every file reads, was wedged). Now a goes with the prune
    and b waits for a's deletion before it is made; without --prune a keeps its port."""
    from devcell.api import apply as api_apply

    state, manifests = tmp_path / "state", tmp_path / "m"
    manifests.mkdir()
    (manifests / "a.yaml").write_text(yaml.safe_dump(_cell("a", [("127.0.0.1", 8080)])))
    api_apply.apply(state, [str(manifests)], options=Options(timeout=60))
    (manifests / "a.yaml").unlink()
    (manifests / "b.yaml").write_text(yaml.safe_dump(_cell("b", [("127.0.0.1", 8080)])))
    with pytest.raises(ManifestError, match='already published by cell "a"'):
        api_apply.apply(state, [str(manifests)])  # no prune: a stays, and keeps its port
    report = api_apply.apply(state, [str(manifests)], prune=True, options=Options(timeout=60))
    assert report.ok
    assert {(c.name, c.outcome) for c in report.recorded.changes} >= {("a", "pruned"),
                                                                     ("b", "created")}
    db = open_database(state)
    try:
        assert objects.get(db.conn, "Cell", "a") is None
        assert objects.require(db.conn, "Cell", "b").phase == "Running"
    finally:
        db.close()


def test_a_cell_waits_while_a_deleting_cell_still_publishes_its_port(tmp_path: Path) -> None:
    from devcell.controllers.cell import CellController
    from devcell.controllers.plan import Wait
    from tests.controllers.support import context_for

    state = tmp_path / "state"
    db = open_database(state)
    try:
        admission.apply_objects(db, [*_manifests(_cell("a", [("127.0.0.1", 8080)]))])
        conn_a = objects.require(db.conn, "Cell", "a")
        with db.write() as conn:
            objects.request_delete(conn, conn_a)
        admission.apply_objects(db, [*_manifests(_cell("b", [("127.0.0.1", 8080)]))])
        with context_for(db) as ctx:
            decision = CellController().decide(ctx, objects.require(db.conn, "Cell", "b").id)
        assert isinstance(decision, Wait) and decision.reason == "PortHeld", decision
        assert "cell a, which is being deleted" in decision.message
    finally:
        db.close()


def _manifests(doc: dict[str, Any]) -> list[Any]:
    from tests.controllers.support import parse

    return parse(doc)


def test_a_sidecars_port_is_held_against_other_cells_as_the_cells_own_are(
        tmp_path: Path) -> None:
    db = open_database(tmp_path / "state")
    try:
        db_cell = _cell("db-app", [])
        db_cell["spec"]["sidecars"] = [{"name": "db", "image": "devcell/busybox:latest",
                                        "ports": [{"containerPort": 5432, "hostPort": 15432}]}]
        (tmp_path / "a.yaml").write_text(yaml.safe_dump(db_cell))
        admission.apply(db, read_sources([str(tmp_path / "a.yaml")]))
        assert security.published(objects.cells_publishing_ports(db.conn)["db-app"].spec) == [
            ("127.0.0.1", 15432)]
        (tmp_path / "b.yaml").write_text(yaml.safe_dump(_cell("other", [("127.0.0.1", 15432)])))
        with pytest.raises(ManifestError) as refused:
            admission.apply(db, read_sources([str(tmp_path / "b.yaml")]))
        problem = refused.value.problems[0]
        assert problem.field == "spec.network.ports[0].hostPort"
        assert 'already published by cell "db-app"' in problem.message
    finally:
        db.close()
