"""`devcell snapshot export | devcell snapshot import`, run as a user runs them."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devcell.store.db import open_database
from tests.conftest import REPO, Cli, db_fingerprint


def _devcell(state: Path) -> str:
    return f"DEVCELL_HOME={shlex.quote(str(state))} {shlex.quote(sys.executable)} -m devcell"


def test_export_to_stdout_piped_into_import(cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    cell = tmp_path / "cell.yaml"
    cell.write_text(textwrap.dedent("""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {name: api}
        spec: {backend: fake, image: devcell/busybox:latest}
        """))
    assert cli("apply", "-f", str(cell)).returncode == 0
    assert cli("snapshot", "create", "api", "--name", "before").returncode == 0
    target = tmp_path / "target"
    pipe = (f"{_devcell(state_dir)} snapshot export before -o - | "
            f"{_devcell(target)} snapshot import - --name moved")
    done = subprocess.run(["sh", "-c", pipe], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("snapshot/moved imported (0 files, 0 bytes, backend fake")
    assert "snapshot/before exported to standard output" in done.stderr
    listed = subprocess.run(f"{_devcell(target)} get snapshots", shell=True, cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert listed.stdout.splitlines()[1].split()[:4] == ["moved", "api", "(imported)", "metadata"]


@pytest.mark.state_dir_only("snapshot import and export are not served (docs/api.md): every "
                            "command of it runs on the state directory, whose every row it "
                            "compares (a serving daemon renews its lease meanwhile)")
def test_a_damaged_archive_is_one_clear_error(cli: Cli, tmp_path: Path,
                                              state_dir: Path) -> None:
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"\0" * 512 + b"definitely not a snapshot archive" * 100)
    open_database(state_dir).close()
    before = db_fingerprint(state_dir)
    done = cli("snapshot", "import", str(bad))
    assert done.returncode == 1
    assert done.stderr.startswith("error: archive refused, nothing imported:"), done.stderr
    assert "Traceback" not in done.stderr
    assert db_fingerprint(state_dir) == before
    missing = cli("snapshot", "export", "nope", "-o", str(tmp_path / "out.tar"))
    assert missing.returncode == 1 and "not found" in missing.stderr
    assert not (tmp_path / "out.tar").exists()
