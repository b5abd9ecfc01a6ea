"""Issue 30: `cell sleep` of a container cell keeps its root filesystem, said and counted.

Run as a user runs it (the CLI as a subprocess) against the real engine. Cost: one cell
created, slept, started and deleted, about 10 s on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from tests.backends.engine import IMAGE
from tests.conftest import Cli


def _manifest(tmp_path: Path) -> Path:
    path = tmp_path / "cell.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: box}}
        spec:
          backend: container
          image: {IMAGE}
          network: {{mode: none}}
          services:
            - {{name: idle, command: [sleep, "600"]}}
        """))
    return path


def _runtimes(cli: Cli) -> tuple[dict[str, Any], dict[str, Any]]:
    """`df`'s Runtimes row and its one item."""
    df = cli("df", "-v", "-o", "json")
    assert df.returncode == 0, df.stderr
    doc = json.loads(df.stdout)
    [row] = [r for r in doc["types"] if r["type"] == "Runtimes"]
    [item] = [i for i in doc["items"] if i["type"] == "Runtimes"]
    return row, item


def test_cell_sleep_keeps_what_was_installed_says_so_and_df_counts_it(
        engine: None, state: Path, cli: Cli, tmp_path: Path, docker_client: Any) -> None:
    manifest = _manifest(tmp_path)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    wrote = cli("exec", "box", "--", "sh", "-c",
                "mkdir -p /usr/local/lib/tool && head -c 300000 /dev/urandom "
                "> /usr/local/lib/tool/blob && echo v1 > /usr/local/lib/tool/version")
    assert wrote.returncode == 0, wrote.stderr

    slept = cli("cell", "sleep", "box")
    assert slept.returncode == 0, slept.stderr
    assert "cell/box configured" in slept.stdout
    assert "cell/box asleep: workspace checkpointed, root filesystem kept" in slept.stdout
    row, item = _runtimes(cli)
    assert item["active"] and "asleep, root filesystem kept" in item["detail"]
    assert item["sizeBytes"] >= 300000  # the engine's count of the kept writable layer
    assert row["sizeBytes"] >= 300000 and row["reclaimableBytes"] == 0  # kept, in use
    described = cli("describe", "cell", "box").stdout
    assert "Sleeping: held Sleeping by `cell sleep` at" in described, described

    again = cli("apply", "-f", str(manifest))  # the unchanged manifest: it sleeps on
    assert again.returncode == 0 and "cell/box unchanged" in again.stdout, again.stdout
    listed = cli("get", "cells").stdout
    assert "Sleeping*" in listed and "Sleeping" in listed.splitlines()[1].split()[3]

    started = cli("cell", "start", "box")
    assert started.returncode == 0, started.stderr
    kept = cli("exec", "box", "--", "sh", "-c",
               "cat /usr/local/lib/tool/version; wc -c < /usr/local/lib/tool/blob")
    assert kept.returncode == 0 and kept.stdout.split() == ["v1", "300000"], kept.stdout

    ours = {"label": ["dev.devcell.cell=box", f"dev.devcell.state-path={state.resolve()}"]}
    assert len(docker_client.containers.list(all=True, filters=ours)) == 1
    deleted = cli("delete", "cell", "box", "--approve")
    assert deleted.returncode == 0, deleted.stderr
    assert not docker_client.containers.list(all=True, filters=ours)  # what was kept went


def test_an_image_cannot_speak_for_devcell_through_its_labels(
        engine: None, state: Path, cli: Cli, tmp_path: Path, docker_client: Any) -> None:
    """A hostile image's LABEL dev.devcell.base-image (what a kept root filesystem says it was
    made on) and dev.devcell.volume are hidden by the values DevCell sets at create."""
    context = tmp_path / "hostile"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {IMAGE}\nLABEL dev.devcell.base-image=sha256:feed dev.devcell.volume=vol_other "
        "dev.devcell.rootfs=true\n")
    manifest = tmp_path / "hostile.yaml"
    manifest.write_text(textwrap.dedent("""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {name: hostile}
        spec:
          backend: container
          build: {context: hostile}
          network: {mode: none}
          services:
            - {name: idle, command: [sleep, "600"]}
        """))
    try:
        applied = cli("apply", "-f", str(manifest))
        assert applied.returncode == 0, applied.stderr
        [container] = docker_client.containers.list(
            all=True, filters={"label": "dev.devcell.cell=hostile"})
        labels = container.labels
        assert labels["dev.devcell.base-image"] == ""
        assert labels["dev.devcell.rootfs"] == ""
        assert labels["dev.devcell.volume"] not in ("", "vol_other")
    finally:
        assert cli("delete", "cell", "hostile").returncode == 0
