"""Errors said in the user's words (issue 31, item 11): a memory quantity refused as
Kubernetes says it ("write 512Mi or 2Gi"), never as a regular expression, and a name not
found gets a "did you mean" where a recorded name is close."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcell.api import apply as apply_api
from devcell.errors import ManifestError, NotFound
from devcell.manifests import quantities
from devcell.store import objects
from devcell.store.db import open_database
from tests.cli import inprocess

CELL = "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: %s}\nspec: %s\n"


@pytest.mark.parametrize("memory", ["12 GB", "1.5Gi", "2gb", "-1Mi", "512MiB"])
def test_a_bad_memory_quantity_says_how_to_write_one(tmp_path: Path, memory: str) -> None:
    manifest = tmp_path / "cell.yaml"
    manifest.write_text(CELL % ("x", f'{{backend: fake, resources: {{memory: "{memory}"}}}}'))
    with pytest.raises(ManifestError) as refused:
        apply_api.apply(tmp_path / "state", [str(manifest)])
    said = str(refused.value.problems[0])
    assert "write 512Mi or 2Gi" in said and "pattern" not in said and "^" not in said, said
    assert "spec.resources.memory" in said and f'"{memory}"' in said


def test_memory_bytes_says_it_the_same_way() -> None:
    with pytest.raises(ValueError, match="write 512Mi or 2Gi"):
        quantities.memory_bytes("12 GB")


def test_a_close_name_is_suggested(tmp_path: Path) -> None:
    manifest = tmp_path / "cell.yaml"
    manifest.write_text(CELL % ("apiserver", "{backend: fake}"))
    apply_api.apply(tmp_path / "state", [str(manifest)])
    db = open_database(tmp_path / "state")
    try:
        with pytest.raises(NotFound, match='did you mean "apiserver"'):
            objects.require(db.conn, "Cell", "apiservr")
        with pytest.raises(NotFound) as far:
            objects.require(db.conn, "Cell", "zzz")
        assert "did you mean" not in str(far.value)
    finally:
        db.close()


@pytest.mark.parametrize("argv", [["get", "cells", "apiservr"], ["describe", "cell", "apiservr"],
                                  ["cell", "start", "apiservr"], ["logs", "apiservr"],
                                  ["snapshot", "create", "apiservr", "--name", "s"],
                                  ["wait", "cell", "apiservr", "--timeout", "1s"],
                                  ["delete", "cell", "apiservr"]])
def test_every_command_suggests_the_close_name(tmp_path: Path, argv: list[str]) -> None:
    manifest = tmp_path / "cell.yaml"
    manifest.write_text(CELL % ("apiserver", "{backend: fake}"))
    state = ["--state-dir", str(tmp_path / "state")]
    assert inprocess.run([*state, "apply", "-f", str(manifest)], tmp_path)[0] == 0
    code, _, err = inprocess.run([*state, *argv], tmp_path)
    assert code == 1, err
    assert err.strip().splitlines()[-1].endswith('did you mean "apiserver"?'), err
