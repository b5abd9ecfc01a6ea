"""`devcell apply` and `diff` keep the compiled validator in the state directory they were
given (resolved as every command resolves it), and nowhere else."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcell.manifests import validate
from tests.cli import inprocess

CELL = ("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: api, labels: {team: "
        "%s}}\nspec: {backend: fake}\n")


@pytest.mark.parametrize("verb", ["apply", "diff"])
def test_a_changed_manifest_keeps_its_validator_in_the_state_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verb: str) -> None:
    state, manifest = tmp_path / "state", tmp_path / "cell.yaml"
    manifest.write_text(CELL % "a")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DEVCELL_HOME", raising=False)
    code, _, err = inprocess.run(["--state-dir", str(state), "apply", "-f", str(manifest)],
                                 tmp_path)
    assert code == 0, err
    manifest.write_text(CELL % "b")
    monkeypatch.setattr(validate, "_FAST", {})  # as a new process: nothing compiled yet
    code, _, err = inprocess.run(["--state-dir", str(state), verb, "-f", str(manifest)],
                                 tmp_path)
    assert code == (0 if verb == "apply" else 1), err
    assert [p.name.split("-")[0] for p in (state / "validators").iterdir()] == ["cell"]
    assert not (tmp_path / "home").exists()
