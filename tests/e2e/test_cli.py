"""The CLI as a user runs it: a subprocess per command, kubectl's habits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Cli

CELL = """apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata:
  name: {name}
  labels: {{team: {team}}}
spec:
  backend: fake
  state: {state}
  env:
    - {{name: TOKEN, value: canary-7f3a9c, secret: true}}
    - {{name: MODE, value: dev}}
"""


def write(dir: Path, name: str, team: str = "core", state: str = "Running") -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    path = dir / f"{name}.yaml"
    path.write_text(CELL.format(name=name, team=team, state=state))
    return path


@pytest.fixture
def applied(cli: Cli, tmp_path: Path) -> Path:
    manifests = tmp_path / "m"
    write(manifests, "api")
    write(manifests, "db", team="data")
    result = cli("apply", "-f", str(manifests))
    assert result.returncode == 0, result.stderr
    return manifests


def test_get_formats_and_selectors(cli: Cli, applied: Path) -> None:
    table = cli("get", "cells")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split()[:4] == ["NAME", "BACKEND", "DESIRED", "PHASE"]
    assert [line.split()[0] for line in lines[1:]] == ["api", "db"]
    assert "ID" in cli("get", "cells", "-o", "wide").stdout.splitlines()[0]
    assert cli("get", "cell", "-o", "name").stdout.split() == ["cell/api", "cell/db"]
    assert cli("get", "cells", "-l", "team=data", "-o", "name").stdout.split() == ["cell/db"]
    assert cli("get", "cells", "-l", "team!=data", "-o", "name").stdout.split() == ["cell/api"]
    listing = json.loads(cli("get", "cells", "-o", "json").stdout)
    assert listing["kind"] == "List" and len(listing["items"]) == 2
    one = json.loads(cli("get", "cell", "api", "-o", "json").stdout)
    assert one["kind"] == "Cell" and one["metadata"]["id"].startswith("cell_")
    by_id = cli("get", "cell", one["metadata"]["id"], "-o", "name")
    assert by_id.stdout.strip() == "cell/api"
    import yaml

    doc = yaml.safe_load(cli("get", "cells", "api", "-o", "yaml").stdout)
    assert doc["status"]["phase"] == "Running"


def test_secret_values_never_shown(cli: Cli, applied: Path, state_dir: Path) -> None:
    outputs = [
        cli("get", "cell", "api", "-o", "yaml").stdout,
        cli("get", "cell", "api", "-o", "json").stdout,
        cli("describe", "cell", "api").stdout,
        cli("get", "events").stdout,
        cli("get", "operations", "-o", "json").stdout,
    ]
    for text in outputs:
        assert "canary-7f3a9c" not in text
    assert "<redacted>" in outputs[0]
    changed = applied / "api.yaml"
    changed.write_text(changed.read_text().replace("MODE, value: dev", "MODE, value: prod")
                       .replace("canary-7f3a9c", "canary-51d2e8"))
    # diff BEFORE the apply, while there is a difference to show (after it, diff prints
    # nothing and could never fail): neither the recorded nor the new secret value appears
    diff = cli("diff", "-f", str(applied))
    assert diff.returncode == 1, diff.stderr  # MODE differs, at least
    assert "prod" in diff.stdout
    for value in ("canary-7f3a9c", "canary-51d2e8"):
        assert value not in diff.stdout + diff.stderr
    verbose = cli("apply", "-f", str(applied), "-vv")
    assert verbose.returncode == 0
    for value in ("canary-7f3a9c", "canary-51d2e8"):
        assert value not in verbose.stdout + verbose.stderr


def test_noop_reapply_writes_nothing(cli: Cli, applied: Path, state_dir: Path) -> None:
    from tests.conftest import db_fingerprint

    calls_db = state_dir / "backends" / "fake.db"
    before = (db_fingerprint(state_dir), calls_db.read_bytes())
    again = cli("apply", "-f", str(applied))
    assert again.returncode == 0
    assert again.stdout.splitlines() == ["cell/api unchanged", "cell/db unchanged"]
    assert (db_fingerprint(state_dir), calls_db.read_bytes()) == before


def test_configured_bumps_generation(cli: Cli, applied: Path) -> None:
    write(applied, "api", team="core", state="Stopped")
    result = cli("apply", "-f", str(applied))
    assert "cell/api configured" in result.stdout and "cell/db unchanged" in result.stdout
    doc = json.loads(cli("get", "cell", "api", "-o", "json").stdout)
    assert doc["metadata"]["generation"] == 2
    assert doc["status"]["observedGeneration"] == 2
    assert doc["status"]["phase"] == "Stopped"
    # a labels-only change is "configured" but keeps the generation
    write(applied, "api", team="platform", state="Stopped")
    assert "cell/api configured" in cli("apply", "-f", str(applied)).stdout
    doc = json.loads(cli("get", "cell", "api", "-o", "json").stdout)
    assert doc["metadata"]["generation"] == 2 and doc["metadata"]["labels"] == {"team": "platform"}


@pytest.mark.state_dir_only("a fresh machine's dry run makes no state directory; a server's "
                            "daemon made it already")
def test_dry_run_writes_nothing(cli: Cli, tmp_path: Path, state_dir: Path, fingerprint) -> None:  # type: ignore[no-untyped-def]
    manifests = tmp_path / "m"
    write(manifests, "api")
    result = cli("apply", "-f", str(manifests), "--dry-run")
    assert result.returncode == 0
    assert result.stdout.strip() == "cell/api created (dry run)"
    assert fingerprint(state_dir) is None  # a dry run on a fresh machine creates nothing
    assert cli("apply", "-f", str(manifests)).returncode == 0
    write(manifests, "api", state="Stopped")
    before = fingerprint(state_dir)
    result = cli("apply", "-f", str(manifests), "--dry-run")
    assert result.stdout.strip() == "cell/api configured (dry run)"
    assert fingerprint(state_dir) == before


def test_stdin(cli: Cli) -> None:
    result = cli("apply", "-f", "-", input=CELL.format(name="piped", team="x", state="Running"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "cell/piped created"


def test_prune_only_touches_objects_from_the_path(cli: Cli, applied: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    write(other, "elsewhere")
    assert cli("apply", "-f", str(other)).returncode == 0
    (applied / "db.yaml").unlink()
    result = cli("apply", "-f", str(applied), "--prune")
    assert result.returncode == 0, result.stderr
    assert "cell/db pruned" in result.stdout
    names = cli("get", "cells", "-o", "name").stdout.split()
    assert names == ["cell/api", "cell/elsewhere"]


def test_delete_by_name_and_by_file(cli: Cli, applied: Path) -> None:
    assert cli("delete", "cell", "api").stdout.strip() == "cell/api deleted"
    assert cli("delete", "-f", str(applied / "db.yaml")).returncode == 0
    assert cli("get", "cells", "-o", "name").stdout == ""
    events = cli("get", "events").stdout
    assert "Deleted" in events
    missing = cli("delete", "cell", "nope")
    assert missing.returncode == 1 and 'cell "nope" not found' in missing.stderr


def test_diff_exit_codes(cli: Cli, applied: Path) -> None:
    assert cli("diff", "-f", str(applied)).returncode == 0
    write(applied, "api", state="Stopped")
    result = cli("diff", "-f", str(applied))
    assert result.returncode == 1
    assert "-  state: Running" in result.stdout and "+  state: Stopped" in result.stdout
    # kubectl's convention: 1 is "differs", an error is above it (a script tells them apart)
    missing = cli("diff", "-f", str(applied / "nope.yaml"))
    assert missing.returncode == 2 and missing.stderr.startswith("error: "), missing
    (applied.parent / "empty.yaml").write_text("# nothing here\n")
    empty = cli("diff", "-f", str(applied.parent / "empty.yaml"))
    assert empty.returncode == 2 and "no objects passed to diff" in empty.stderr, empty


def test_snapshot_fork_sleep_start(cli: Cli, applied: Path) -> None:
    assert cli("snapshot", "create", "api", "--name", "s1").stdout.strip() == "snapshot/s1 created"
    assert "s1" in cli("snapshot", "list", "api").stdout
    assert cli("snapshot", "list", "db").stdout == ""
    fork = cli("cell", "fork", "api", "--snapshot", "s1", "--name", "api-fork")
    assert fork.returncode == 0, fork.stderr
    doc = json.loads(cli("get", "cell", "api-fork", "-o", "json").stdout)
    assert doc["status"]["lineage"]["forkedFrom"] == {
        "snapshot": "s1", "snapshotId": doc["status"]["lineage"]["forkedFrom"]["snapshotId"],
        "cell": "api"}
    snaps = cli("get", "snapshots").stdout
    assert "api-fork" in snaps and "metadata" in snaps
    wrong = cli("cell", "fork", "db", "--snapshot", "s1", "--name", "x")
    assert wrong.returncode == 1 and "was taken of cell" in wrong.stderr

    assert cli("cell", "sleep", "api").returncode == 0
    doc = json.loads(cli("get", "cell", "api", "-o", "json").stdout)
    assert doc["status"]["phase"] == "Sleeping" and doc["status"]["sleep"]["consistency"] == "metadata"
    assert cli("cell", "start", "api").returncode == 0
    described = cli("describe", "cell", "api").stdout
    assert "processes and memory were not restored" in described
    ops = cli("get", "operations", "api", "-o", "json")
    actions = [o["action"] for o in json.loads(ops.stdout)["items"]]
    assert actions[-2:] == ["sleep", "wake"]

    refused = cli("delete", "snapshot", "s1")
    assert refused.returncode == 1 and "api-fork" in refused.stderr


@pytest.mark.state_dir_only("the failure is injected into the CLI's own process "
                            "(DEVCELL_FAKE_FAIL), not the server's")
def test_fork_count_names_the_fork_that_failed(cli: Cli, applied: Path) -> None:
    assert cli("snapshot", "create", "api", "--name", "s1").returncode == 0
    made = cli("cell", "fork", "api", "--snapshot", "s1", "--name", "exp", "--count", "3",
               env={"DEVCELL_FAKE_FAIL": "start@exp-2:perm"})
    assert made.returncode == 1
    assert made.stdout.split("\n")[:3] == ["cell/exp-1 created", "cell/exp-2 created",
                                           "cell/exp-3 created"]
    [error] = [line for line in made.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith("error: cell/exp-2: ") and "injected failure" in error
    phases = {d["metadata"]["name"]: d["status"]["phase"] for d in json.loads(
        cli("get", "cells", "-o", "json").stdout)["items"]}
    assert phases == {"api": "Running", "db": "Running", "exp-1": "Running",
                      "exp-2": "Failed", "exp-3": "Running"}
    again = cli("cell", "fork", "api", "--snapshot", "s1", "--name", "exp", "--count", "4")
    assert again.returncode == 1 and "cell exp-1, exp-2, exp-3 already exist" in again.stderr
    assert "exp-4" not in cli("get", "cells", "-o", "name").stdout
    bad = cli("cell", "fork", "api", "--snapshot", "s1", "--name", "exp", "--count", "0")
    assert bad.returncode == 2 and "invalid fork count" in bad.stderr


def test_describe_operation_shows_steps(cli: Cli, applied: Path) -> None:
    op_id = cli("get", "operations", "-o", "name").stdout.split()[0].split("/")[1]
    out = cli("describe", "operation", op_id).stdout
    assert "create-volume" in out and "Succeeded" in out


@pytest.mark.state_dir_only("the failure is injected into the CLI's own process "
                            "(DEVCELL_FAKE_FAIL), not the server's")
def test_failed_step_exit_code_and_record(cli: Cli, tmp_path: Path) -> None:
    manifests = tmp_path / "m"
    write(manifests, "flaky")
    result = cli("apply", "-f", str(manifests), env={"DEVCELL_FAKE_FAIL": "start@flaky"})
    assert result.returncode == 1
    assert "cell/flaky: step start failed: injected failure" in result.stderr
    assert "Traceback" not in result.stderr
    doc = json.loads(cli("get", "cell", "flaky", "-o", "json").stdout)
    assert doc["status"]["phase"] == "Failed"
    ready = doc["status"]["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "StepFailed")
    # level-triggered: the next apply retries and converges
    again = cli("apply", "-f", str(manifests))
    assert again.returncode == 0, again.stderr
    assert "cell/flaky unchanged" in again.stdout
    assert json.loads(cli("get", "cell", "flaky", "-o", "json").stdout)["status"]["phase"] == "Running"


@pytest.mark.parametrize("args", [["get"], ["get", "widgets"], ["apply"], ["frobnicate"],
                                  ["get", "cells", "-o", "xml"]])
def test_usage_errors_exit_2(cli: Cli, args: list[str]) -> None:
    result = cli(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_get_on_empty_state(cli: Cli) -> None:
    result = cli("get", "cells")
    assert result.returncode == 0 and "No resources found" in result.stderr
    assert cli("get", "cell", "x").returncode == 1


def test_schema_command(cli: Cli) -> None:
    schema = json.loads(cli("schema", "cell").stdout)
    assert schema["title"] == "Cell"
    assert json.loads(cli("schema", "snapshots").stdout)["title"] == "Snapshot"


def test_state_files_are_owner_only(cli: Cli, applied: Path, state_dir: Path) -> None:
    assert state_dir.stat().st_mode & 0o777 == 0o700
    for path in state_dir.rglob("*"):
        if path.is_file():
            assert path.stat().st_mode & 0o077 == 0, path
