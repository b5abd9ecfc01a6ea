"""describe shows when a failing object is retried next (the daemon's backoff), and the
privileges a cell was given."""

from __future__ import annotations

from pathlib import Path

from devcell.store import objects
from devcell.store.db import open_database
from tests.conftest import Cli

CELL = """apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {name: api}
spec: {backend: fake}
"""


def test_describe_shows_the_next_retry_and_the_attempt(cli: Cli, state_dir: Path,
                                                       tmp_path: Path) -> None:
    manifest = tmp_path / "api.yaml"
    manifest.write_text(CELL)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    assert "Next retry" not in cli("describe", "cell", "api").stdout
    db = open_database(state_dir)
    record = objects.get(db.conn, "Cell", "api")
    assert record is not None
    objects.note_retry(db, "Cell", record.id, at="2026-12-01T00:00:05.000Z", retries=3)
    db.close()
    shown = cli("describe", "cell", "api").stdout
    assert "Next retry:         2026-12-01T00:00:05.000Z (attempt 4, backing off)" in shown


def test_describe_shows_the_privileges_a_cell_was_given(cli: Cli, state_dir: Path,
                                                         tmp_path: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "config.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n"
        "  allowedCapabilities: [SYS_PTRACE]\n  allowedSecurityOpts: [seccomp=unconfined]\n")
    (state_dir / "config.yaml").chmod(0o600)
    manifest = tmp_path / "api.yaml"
    manifest.write_text(CELL.replace("spec: {backend: fake}", "spec:\n  backend: fake\n"
                                     "  security: {capabilities: [SYS_PTRACE], securityOpt: "
                                     "[seccomp=unconfined], init: true}\n"))
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    shown = cli("describe", "cell", "api").stdout
    assert "Privileges:         capabilities SYS_PTRACE; security options seccomp=unconfined\n" \
        in shown
