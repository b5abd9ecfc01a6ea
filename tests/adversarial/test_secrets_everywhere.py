"""A secret of any YAML type never reaches any output, and no hash gives one away.

A secret is declared by position (`spec.env[i]` with `secret: true`); whatever the value is
(a number, a date, a list, a mapping, bytes, a multi-line string, an anchor, a value too long
or with a bad tag), it must not appear in: apply's and diff's errors, events, `get
controllers`, describe, `get -o yaml|json`, operations, the daemon's log (text and JSON) of a
cell that fails. Every needle below is a fragment of a secret value that an echo would show.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devcell.controllers.cell import RUNTIME_FIELDS
from devcell.controllers.context import Context
from devcell.manifests.model import digest
from devcell.store.db import open_database
from tests.conftest import REPO, Cli
from tests.controllers.support import converge_all


@dataclass(frozen=True)
class Case:
    id: str
    value: str
    """The YAML written after `value:` (block style; may span lines)."""
    needles: tuple[str, ...]
    flag: str = "true"
    flag_first: bool = False


INVALID = [
    Case("int", "90210417", ("90210417",)),
    Case("int-flag-first", "90210418", ("90210418",), flag_first=True),
    Case("float", "31415.926", ("31415.926",)),
    Case("bool", "on", ("unquoted on", "boolean true")),
    Case("null", "~", ()),
    Case("date", "2031-07-19", ("2031-07-19",)),
    Case("timestamp", "2031-07-19 12:34:56", ("12:34:56",)),
    Case("binary", "!!binary azlzZWNyZXQtYmlu", ("azlzZWNyZXQtYmlu", "k9secret-bin")),
    Case("list", "[k9list-secret, 77665544]", ("k9list-secret", "77665544")),
    Case("map", "{inner: k9map-secret}", ("k9map-secret",)),
    Case("bad-tag", "!!int k9badint", ("k9badint",)),
    Case("bad-tag-flag-first", "!!float k9badfloat", ("k9badfloat",), flag_first=True),
    Case("anchor", "&tok k9anchored\n    - name: COPY\n      value: *tok\n      secret: true",
         ("k9anchored",)),
    Case("too-long", '"k9long' + "x" * 65540 + '"', ("k9long",)),
    Case("flag-mistyped", "55443322", ("55443322",), flag='"yes"'),
    Case("unterminated", '"k9unterminated', ("k9unterminated",)),
]
"""Secrets the manifest is refused for: the refusal must name the place, not the value."""

VALID = "k9plain-secret-value"
MULTILINE = ("k9line-one", "k9line-two")
ALL_NEEDLES = [n for c in INVALID for n in c.needles] + [VALID, *MULTILINE]


def invalid_doc(case: Case) -> str:
    name = f"c-{case.id}"
    lines = ["apiVersion: devcell.dev/v1alpha1", "kind: Cell", f"metadata: {{name: {name}}}",
             "spec:", "  backend: fake", "  env:", "    - name: TOKEN"]
    flag, value = f"      secret: {case.flag}", f"      value: {case.value}"
    lines += [flag, value] if case.flag_first else [value, flag]
    return "\n".join(lines) + "\n"


def valid_doc(secret: str = VALID) -> str:
    return f"""apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {{name: api}}
spec:
  backend: fake
  env:
    - name: TOKEN
      value: {secret}
      secret: true
    - name: LINES
      secret: true
      value: |
        {MULTILINE[0]}
        {MULTILINE[1]}
    - {{name: MODE, value: dev}}
"""


def assert_hidden(where: str, text: str, needles: list[str] | tuple[str, ...]) -> None:
    for needle in needles:
        assert needle not in text, f"{where} shows the secret fragment {needle!r}:\n{text[:3000]}"


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_a_refused_secret_is_located_never_quoted(cli: Cli, tmp_path: Path, case: Case) -> None:
    path = tmp_path / f"{case.id}.yaml"
    path.write_text(invalid_doc(case))
    for verb in ("apply", "diff"):
        result = cli(verb, "-f", str(path))
        assert result.returncode == (1 if verb == "apply" else 2), (verb, result.stderr)
        assert f"{case.id}.yaml:" in result.stderr, result.stderr  # the place is named
        assert "spec.env[0]" in result.stderr or "YAML syntax error" in result.stderr, (
            result.stderr)
        assert_hidden(f"{verb} of {case.id}", result.stdout + result.stderr, case.needles)


def outputs(cli: Cli, op_ids: list[str]) -> dict[str, str]:
    """Every read-side output a person or script sees of cell api and the daemon."""
    shown = {
        " ".join(args): (lambda r: r.stdout + r.stderr)(cli(*args)) for args in [
            ("get", "cell", "api", "-o", "yaml"), ("get", "cell", "api", "-o", "json"),
            ("get", "cells", "-o", "wide"), ("describe", "cell", "api"),
            ("get", "events"), ("get", "events", "-o", "json"),
            ("get", "operations", "-o", "yaml"), ("get", "operations", "-o", "wide"),
            ("get", "controllers"), ("get", "controllers", "-o", "json"),
        ]}
    for op in op_ids:
        shown[f"describe operation {op}"] = cli("describe", "operation", op).stdout
    return shown


def test_a_valid_secret_never_shows(cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    path = tmp_path / "api.yaml"
    path.write_text(valid_doc())
    applied = cli("apply", "-f", str(path), "-vv")
    assert applied.returncode == 0, applied.stderr
    assert_hidden("apply -vv", applied.stdout + applied.stderr, ALL_NEEDLES)
    ops = [o["id"] for o in json.loads(cli("get", "operations", "-o", "json").stdout)["items"]]
    assert ops
    shown = outputs(cli, ops)
    for where, text in shown.items():
        assert_hidden(where, text, ALL_NEEDLES)
    assert "<redacted>" in shown["get cell api -o yaml"]


def test_diff_reports_a_change_of_a_secret_alone_without_either_value(
        cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "api.yaml"
    path.write_text(valid_doc())
    assert cli("apply", "-f", str(path)).returncode == 0
    assert cli("diff", "-f", str(path)).returncode == 0  # nothing changed
    path.write_text(valid_doc("k9new-secret-value"))
    diff = cli("diff", "-f", str(path))
    assert diff.returncode == 1, diff.stdout + diff.stderr  # as kubectl diff: it differs
    assert "<secret changed>" in diff.stdout
    assert_hidden("diff", diff.stdout + diff.stderr, [VALID, "k9new-secret-value", *MULTILINE])
    assert "cell/api configured" in cli("apply", "-f", str(path)).stdout  # apply agrees


def test_no_hash_over_a_secret_is_unkeyed(cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    """The runtime hash (a container label), the stored spec hashes and the recorded file
    digest all change with a secret, but none is a plain hash anyone can check guesses with."""
    path = tmp_path / "api.yaml"
    path.write_text(valid_doc())
    assert cli("apply", "-f", str(path)).returncode == 0
    key = state_dir / "hash.key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    conn = sqlite3.connect(state_dir / "state.db")
    spec, spec_hash, manifest_hash = conn.execute(
        "SELECT spec, spec_hash, manifest_hash FROM cells WHERE name = 'api'").fetchone()
    (file_digest,) = conn.execute("SELECT digest FROM applied_sources").fetchone()
    conn.close()
    spec = json.loads(spec)
    plain = {k: spec.get(k) for k in RUNTIME_FIELDS}
    fake = sqlite3.connect(state_dir / "backends" / "fake.db")
    (label,) = fake.execute("SELECT runtime_hash FROM cells").fetchone()
    fake.close()
    assert label != digest(plain)  # what an unkeyed hash of the secret would be
    assert spec_hash != digest(spec)
    assert manifest_hash != digest([spec, {}, {}])
    assert file_digest != hashlib.sha256(path.read_bytes()).hexdigest()
    # A secret change alone still changes the runtime hash: the container is recreated.
    path.write_text(valid_doc("k9rotated"))
    assert "cell/api configured" in cli("apply", "-f", str(path)).stdout
    fake = sqlite3.connect(state_dir / "backends" / "fake.db")
    (after,) = fake.execute("SELECT runtime_hash FROM cells").fetchone()
    fake.close()
    assert after != label


@pytest.fixture
def daemon_procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)


@pytest.mark.parametrize("log_json", [False, True], ids=["text-log", "json-log"])
def test_the_daemon_never_shows_a_secret(cli: Cli, tmp_path: Path, state_dir: Path,
                                         daemon_procs: list[subprocess.Popen[bytes]],
                                         log_json: bool) -> None:
    """A daemon watching every refused secret and a valid cell whose start keeps failing:
    its log at -vv, its status, the cell's events, operations and documents hold none."""
    watched = tmp_path / "watched"
    watched.mkdir()
    for case in INVALID:
        (watched / f"{case.id}.yaml").write_text(invalid_doc(case))
    (watched / "api.yaml").write_text(valid_doc())
    env = dict(os.environ, DEVCELL_HOME=str(state_dir), DEVCELL_FAKE_FAIL="start@api:perm")
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "devcell", "controller", "run", "--manifests", str(watched),
             "-vv", *(["--log-json"] if log_json else [])],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    daemon_procs.append(proc)
    deadline = time.monotonic() + 60
    ops: list[str] = []
    while not ops:
        assert proc.poll() is None, log.read_text(errors="replace")
        assert time.monotonic() < deadline, log.read_text(errors="replace")
        time.sleep(0.2)
        if (state_dir / "state.db").exists():
            listed = cli("get", "operations", "-o", "json")
            items = json.loads(listed.stdout or "{}").get("items", [])
            ops = [o["id"] for o in items if o["status"] == "Failed"]
    shown = outputs(cli, ops)
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    text = log.read_text(errors="replace")
    assert "injected failure" in text  # the failure was logged ...
    assert_hidden("daemon log", text, ALL_NEEDLES)  # ... and no secret with it
    assert "InvalidManifest" in shown["get controllers -o json"]
    for where, output in shown.items():
        assert_hidden(where, output, ALL_NEEDLES)


def test_every_log_sink_is_added_without_diagnose() -> None:
    """loguru's diagnose prints the local variables of a traceback, secrets included: every
    sink DevCell, its tests and its benches add must turn it off."""
    missing = []
    for top in ("devcell", "tests", "bench", "scripts"):
        for path in (REPO / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "add" and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "logger"):
                    off = any(k.arg == "diagnose" and isinstance(k.value, ast.Constant)
                              and k.value.value is False for k in node.keywords)
                    if not off:
                        missing.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not missing, f"logger.add without diagnose=False: {missing}"


def test_a_traceback_in_the_text_log_shows_no_local_variable(
        capsys: pytest.CaptureFixture[str]) -> None:
    from loguru import logger

    from devcell.cli import log_sink

    def failing(token: str) -> None:
        raise RuntimeError("boom")

    log_sink.configure(2)
    try:
        try:
            failing("k9local" + "-secret")  # its source line shows no secret, a local would
        except RuntimeError:
            logger.exception("reconcile raised")
    finally:
        logger.remove()
    err = capsys.readouterr().err
    assert "reconcile raised" in err and "RuntimeError: boom" in err
    assert "k9local-secret" not in err


def fake_label(state_dir: Path) -> str:
    fake = sqlite3.connect(state_dir / "backends" / "fake.db")
    try:
        (label,) = fake.execute("SELECT runtime_hash FROM cells").fetchone()
        return str(label)
    finally:
        fake.close()


def creates(state_dir: Path) -> int:
    fake = sqlite3.connect(state_dir / "backends" / "fake.db")
    try:
        return int(fake.execute("SELECT count(*) FROM calls WHERE method = 'create'").fetchone()[0])
    finally:
        fake.close()


@pytest.mark.parametrize("with_secret", [True, False], ids=["secret", "no-secret"])
def test_an_upgraded_state_dir_recreates_at_most_once(cli: Cli, tmp_path: Path, state_dir: Path,
                                                      with_secret: bool) -> None:
    """A runtime which an older DevCell labelled with the unkeyed hash: a cell with secrets is
    recreated once (the old label was the leak), a cell without keeps its runtime."""
    path = tmp_path / "api.yaml"
    text = valid_doc() if with_secret else valid_doc().split("  env:")[0]
    path.write_text(text)
    assert cli("apply", "-f", str(path)).returncode == 0
    conn = sqlite3.connect(state_dir / "state.db")
    (spec,) = conn.execute("SELECT spec FROM cells WHERE name = 'api'").fetchone()
    conn.close()
    spec = json.loads(spec)
    old = digest({k: spec.get(k) for k in RUNTIME_FIELDS})  # what DevCell wrote before
    fake = sqlite3.connect(state_dir / "backends" / "fake.db")
    fake.execute("UPDATE cells SET runtime_hash = ?", (old,))
    fake.commit()
    fake.close()
    before = creates(state_dir)
    db = open_database(state_dir)
    ctx = Context(db, trigger="test")
    try:
        for _ in range(3):  # as the daemon's resyncs would
            converge_all(ctx)
    finally:
        ctx.close()
        db.close()
    assert creates(state_dir) - before == (1 if with_secret else 0)
    assert (fake_label(state_dir) == old) is not with_secret


def test_container_label_holds_no_unkeyed_hash_and_a_secret_change_recreates(
        cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    """The real engine: `docker inspect` shows a keyed runtime hash, and a rotated secret
    gives a new container."""
    from tests.backends.engine import IMAGE, remove_containers, require_engine

    require_engine()
    import docker

    from devcell.backends.container.spec import RUNTIME_HASH, STATE
    from devcell.backends.host.ids import state_hash

    def doc(secret: str) -> str:
        return (f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: box}}\n"
                f"spec:\n  backend: container\n  image: {IMAGE}\n"
                f"  env:\n    - {{name: PIN, value: '{secret}', secret: true}}\n"
                "  services:\n    - {name: idle, command: [sleep, '600']}\n")

    client = docker.from_env()
    path = tmp_path / "box.yaml"
    try:
        path.write_text(doc("424242"))
        applied = cli("apply", "-f", str(path))
        assert applied.returncode == 0, applied.stderr

        def container() -> Any:
            mine = f"{STATE}={state_hash(state_dir)}"
            (found,) = client.containers.list(all=True, filters={"label": mine})
            return found

        first = container()
        conn = sqlite3.connect(state_dir / "state.db")
        (spec,) = conn.execute("SELECT spec FROM cells WHERE name = 'box'").fetchone()
        conn.close()
        spec = json.loads(spec)
        label = first.labels[RUNTIME_HASH]
        inspected = json.dumps(client.api.inspect_container(first.id))
        assert "424242" not in inspected
        assert digest({k: spec.get(k) for k in RUNTIME_FIELDS}) not in inspected
        path.write_text(doc("424243"))
        assert "cell/box configured" in cli("apply", "-f", str(path)).stdout
        second = container()
        assert second.id != first.id  # recreated for the new secret
        assert second.labels[RUNTIME_HASH] != label
    finally:
        client.close()
        remove_containers(state_dir)
