"""`devcell import devcontainer`: the manifest it writes is validated once, as apply would,
and the compiled validator is kept in the state directory only when that has its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcell.manifests import validate
from devcell.store import hashkey
from tests.cli import inprocess


def _project(root: Path) -> Path:
    (root / ".devcontainer").mkdir(parents=True)
    (root / ".devcontainer" / "devcontainer.json").write_text(
        '{"image": "devcell/busybox:latest", "containerEnv": {"LEVEL": "debug"}}')
    return root


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    parsed: list[str] = []
    real = validate.parse_source

    def counting(source: Any, place: Any = None) -> Any:
        parsed.append(source.display)
        return real(source, place)
    monkeypatch.setattr(validate, "parse_source", counting)
    return parsed


def test_the_manifest_is_validated_once_and_its_validator_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path / "web")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    hashkey.load(state)
    monkeypatch.setattr(validate, "_FAST", {})  # as a new process: nothing compiled yet
    parsed = _counted(monkeypatch)
    code, out, err = inprocess.run(["--state-dir", str(state), "import", "devcontainer",
                                    str(project), "-o", str(project / "cell.yaml")], tmp_path)
    assert code == 0, err
    assert parsed == [str(project / "cell.yaml")]  # once, blamed on the file written
    assert [p.name.split("-")[0] for p in (state / "validators").iterdir()] == ["cell"]


def test_without_a_state_directory_nothing_is_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path / "web")
    monkeypatch.setattr(validate, "_FAST", {})
    code, out, err = inprocess.run(["--state-dir", str(tmp_path / "state"), "import",
                                    "devcontainer", str(project)], tmp_path)
    assert code == 0, err
    assert "LEVEL" in out
    assert not (tmp_path / "state").exists()
