"""`devcell port-forward`'s arguments and its refusals, without an engine: kubectl's port
syntax, loopback only, and a backend that cannot forward said so (exit codes as users see)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcell.api.port_forward import Mapping, loopback, parse
from devcell.errors import UsageError
from tests.conftest import Cli


def test_ports_are_written_as_kubectl_writes_them() -> None:
    assert parse(["8080", "9000:80", ":443"]) == [Mapping(8080, 8080), Mapping(9000, 80),
                                                  Mapping(0, 443)]


@pytest.mark.parametrize("spec", ["0", "70000", "a:80", "80:", "1:2:3", "８０", " 80", "-1"])
def test_a_bad_port_is_a_usage_error(spec: str) -> None:
    with pytest.raises(UsageError, match="invalid port"):
        parse([spec])


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "192.0.2.1", "example.com", ""])
def test_a_forward_listens_on_loopback_only(address: str) -> None:
    with pytest.raises(UsageError, match="loopback only"):
        loopback(address)
    assert loopback("localhost") == "127.0.0.1" and loopback("::1") == "::1"
    assert loopback("127.0.0.2") == "127.0.0.2"


def test_a_fake_cell_cannot_be_forwarded_to_and_says_so(cli: Cli, tmp_path: Path) -> None:
    manifest = tmp_path / "c.yaml"
    manifest.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: c}\n"
                        "spec: {backend: fake}\n")
    assert cli("apply", "-f", str(manifest)).returncode == 0
    done = cli("port-forward", "c", "8080")
    assert done.returncode != 0 and "capability exec" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    refused = cli("port-forward", "--address", "0.0.0.0", "c", "8080")
    assert refused.returncode == 2 and "loopback only" in refused.stderr
    assert cli("port-forward", "nosuch", "80").returncode == 1


def test_get_wide_and_describe_show_published_and_forwarded_ports(cli: Cli,
                                                                 tmp_path: Path) -> None:
    import os

    from devcell.store import forwards, objects
    from devcell.store.db import open_database

    manifest = tmp_path / "c.yaml"
    manifest.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: c}\n"
                        "spec: {backend: fake, network: {mode: bridge, ports: "
                        "[{containerPort: 80, hostPort: 8080}]}}\n")
    assert cli("apply", "-f", str(manifest)).returncode == 0
    state = tmp_path / "state"
    db = open_database(state)
    try:
        cell_id = objects.require(db.conn, "Cell", "c").id
    finally:
        db.close()
    forwards.record(state, forwards.Forward(os.getpid(), cell_id, "127.0.0.1", ((40001, 3000),)))
    forwards.record(state, forwards.Forward(2**22 + 7, cell_id, "127.0.0.1", ((1, 2),)))  # dead
    wide = cli("get", "cells", "-o", "wide").stdout
    assert "PORTS" in wide and "8080->80,40001=>3000" in wide, wide
    shown = cli("describe", "cell", "c").stdout
    assert "127.0.0.1:8080 -> 80 (published)" in shown
    assert f"127.0.0.1:40001 -> 3000 (port-forward, pid {os.getpid()})" in shown
    assert "1 -> 2" not in shown
    assert not (state / "forwards" / f"{2**22 + 7}.json").exists()  # a dead pid's, removed
