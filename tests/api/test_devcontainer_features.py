"""devcontainer.json `features` and `overrideFeatureInstallOrder` imported as spec.features:
OCI references as written, a bare id as the devcontainers/features one, a local folder
relative to the manifest, the version shorthand, options as strings or booleans, the override
order first; a malformed entry refused with file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devcell.api import devcontainer
from devcell.errors import ManifestError

GHCR = "ghcr.io/devcontainers/features"


def _convert(root: Path, data: dict[str, object]) -> devcontainer.Conversion:
    path = root / ".devcontainer" / "devcontainer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    feature = root / ".devcontainer" / "greeting"
    feature.mkdir(exist_ok=True)
    (feature / "devcontainer-feature.json").write_text(json.dumps({
        "id": "greeting", "options": {"greeting": {"type": "string", "default": "hi"}}}))
    (feature / "install.sh").write_text("#!/bin/sh\n")
    return devcontainer.convert(path, name="proj", out_dir=root, state_dir=root / "state",
                                env={"HOME": "/home/dev"})


def test_each_form_of_reference_and_options(tmp_path: Path) -> None:
    done = _convert(tmp_path, {
        "image": "devcell/busybox:latest",
        "features": {
            f"{GHCR}/node:1": {"version": "lts", "nodeGypDependencies": False},
            "./greeting": {"greeting": "hello"},
            "go": "1.22",
            f"{GHCR}/python:1": {"version": 3.12},
        },
        "overrideFeatureInstallOrder": ["./greeting", f"{GHCR}/python"],
    })
    assert done.manifest["spec"]["features"] == [
        {"ref": "./.devcontainer/greeting", "options": {"greeting": "hello"}},
        {"ref": f"{GHCR}/python:1", "options": {"version": "3.12"}},
        {"ref": f"{GHCR}/node:1", "options": {"version": "lts", "nodeGypDependencies": False}},
        {"ref": f"{GHCR}/go", "options": {"version": "1.22"}},
    ]
    assert any("features.go: a bare feature id, read as ghcr.io/devcontainers/features/go"
               in note for note in done.notes), done.notes


@pytest.mark.parametrize(("features", "field", "message"), [
    ({"http://example.com/x.tgz": {}}, "features.http://example.com/x.tgz", "must be https"),
    ({f"{GHCR}/node:1": {"version": ["lts"]}}, "features.ghcr.io/devcontainers/features/"
     "node:1.version", "an option is a string or true/false"),
    ({f"{GHCR}/node:1": 3}, "features.ghcr.io/devcontainers/features/node:1",
     "expected an object of options"),
])
def test_a_malformed_feature_is_refused_naming_it(tmp_path: Path, features: dict[str, object],
                                                  field: str, message: str) -> None:
    with pytest.raises(ManifestError) as refused:
        _convert(tmp_path, {"image": "devcell/busybox:latest", "features": features})
    shown = [str(p) for p in refused.value.problems]
    assert any(f": {field}: " in s and message in s for s in shown), shown


def test_a_local_features_options_are_checked_at_import(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as refused:
        _convert(tmp_path, {"image": "devcell/busybox:latest",
                            "features": {"./greeting": {"colour": "red"}}})
    assert "no option colour" in str(refused.value.problems), refused.value.problems
