"""`devcell snapshot export | devcell snapshot import`, run as a user runs them."""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

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


def _imports(state_dir: Path) -> list[tuple[object, ...]]:
    """What an import records: snapshots, operations and their events (a serving daemon
    renews its lease and converges its cells meanwhile, so not every row)."""
    conn = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True)
    try:
        return [*conn.execute("SELECT id, name FROM snapshots ORDER BY id"),
                *conn.execute("SELECT id, action, object_name FROM operations ORDER BY id"),
                *conn.execute("SELECT id, reason FROM events WHERE object_kind = 'Snapshot' "
                              "ORDER BY id")]
    finally:
        conn.close()


def test_a_damaged_archive_is_one_clear_error(cli: Cli, tmp_path: Path, state_dir: Path,
                                              cli_mode: str) -> None:
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"\0" * 512 + b"definitely not a snapshot archive" * 100)
    open_database(state_dir).close()
    before = db_fingerprint(state_dir), _imports(state_dir)
    done = cli("snapshot", "import", str(bad))
    assert done.returncode == 1
    assert done.stderr.startswith("error: archive refused, nothing imported:"), done.stderr
    assert "Traceback" not in done.stderr
    if cli_mode == "direct":
        assert db_fingerprint(state_dir) == before[0]
    assert _imports(state_dir) == before[1]
    assert not list((state_dir / "api-imports").glob("*"))  # served: the spool removed
    missing = cli("snapshot", "export", "nope", "-o", str(tmp_path / "out.tar"))
    assert missing.returncode == 1 and "not found" in missing.stderr
    assert not (tmp_path / "out.tar").exists()


def test_export_to_a_file_then_import_it(cli: Cli, tmp_path: Path) -> None:
    """`snapshot export -o FILE` and `snapshot import FILE` (through the server in its
    modes): the lines and exit codes direct use has, the archive whole in the file."""
    cell = tmp_path / "cell.yaml"
    cell.write_text(textwrap.dedent("""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {name: api}
        spec: {backend: fake, image: devcell/busybox:latest}
        """))
    assert cli("apply", "-f", str(cell)).returncode == 0
    assert cli("snapshot", "create", "api", "--name", "before").returncode == 0
    archive = tmp_path / "before.tar"
    done = cli("snapshot", "export", "before", "-o", str(archive))
    assert done.returncode == 0, done.stderr
    said = re.fullmatch(rf"snapshot/before exported to {re.escape(str(archive))} \(\d+ "
                        r"entries, 0 bytes, sha256 ([0-9a-f]{64})\)\n", done.stdout)
    assert said and done.stderr == "", done.stdout + done.stderr
    assert not list(tmp_path.glob(".before.tar.*"))  # made whole: no partial file left
    with tarfile.open(archive) as tar:
        assert tar.getnames()[0] == "devcell-snapshot.json"
    done = cli("snapshot", "import", str(archive), "--name", "moved")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"snapshot/moved imported (0 files, 0 bytes, backend fake, "
                           f"sha256 {said.group(1)})\n"), done.stdout
    again = cli("snapshot", "import", str(archive), "--name", "moved")
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr == ('error: snapshot "moved" already exists; import under another '
                            "name with --name\n"), again.stderr
    bad_name = cli("snapshot", "import", str(archive), "--name", "Bad_Name")
    assert bad_name.returncode == 1 and "--name" in bad_name.stderr
    assert bad_name.stderr.endswith("1 problem found; nothing was changed\n")
    directory = cli("snapshot", "export", "before", "-o", str(tmp_path))
    assert directory.returncode == 2 and "is a directory" in directory.stderr
