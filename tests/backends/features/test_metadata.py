"""A feature's devcontainer-feature.json read and its options resolved as install.sh gets
them (the specification's variable names, defaults, enum), malformed ones refused naming
the feature and field."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from devcell.backends.features import metadata
from devcell.errors import ImageBuildFailed


def _folder(tmp_path: Path, data: object, install: bool = True) -> str:
    (tmp_path / "devcontainer-feature.json").write_text(json.dumps(data))
    if install:
        (tmp_path / "install.sh").write_text("#!/bin/sh\n")
    return str(tmp_path)


def test_option_names_become_the_specifications_variables() -> None:
    assert metadata.env_name("version") == "VERSION"
    assert metadata.env_name("install-tools") == "INSTALL_TOOLS"
    assert metadata.env_name("node.js") == "NODE_JS"
    assert metadata.env_name("3rd-party") == "_RD_PARTY"


def test_options_take_defaults_and_are_checked(tmp_path: Path) -> None:
    feature = metadata.read(_folder(tmp_path, {
        "id": "node", "version": "1.2.0",
        "options": {"version": {"type": "string", "default": "lts", "proposals": ["lts"]},
                    "flavour": {"type": "string", "enum": ["a", "b"], "default": "a"},
                    "yarn": {"type": "boolean", "default": False}},
        "installsAfter": ["ghcr.io/devcontainers/features/common-utils"],
        "containerEnv": {"NODE_HOME": "/usr/local/node"}}), "node")
    assert feature.installs_after == ("ghcr.io/devcontainers/features/common-utils",)
    env = metadata.resolve_options(feature, {"version": "20", "yarn": True}, "node")
    assert env == {"VERSION": "20", "FLAVOUR": "a", "YARN": "true"}
    with pytest.raises(ImageBuildFailed, match="option flavour must be one of a, b"):
        metadata.resolve_options(feature, {"flavour": "c"}, "node")
    with pytest.raises(ImageBuildFailed, match="option yarn is a boolean"):
        metadata.resolve_options(feature, {"yarn": "maybe"}, "node")
    with pytest.raises(ImageBuildFailed, match="no option colour .its options: flavour, "):
        metadata.resolve_options(feature, {"colour": "x"}, "node")


@pytest.mark.parametrize(("data", "field"), [
    ({"version": "1"}, "field id"),
    ({"id": "x", "options": {"a": {"type": "number"}}}, "options.a"),
    ({"id": "x", "capAdd": "SYS_PTRACE"}, "field capAdd"),
    ({"id": "x", "containerEnv": {"A": "line\nbreak"}}, "field containerEnv"),
    ({"id": "x", "privileged": "yes"}, "field privileged"),
    ({"id": "x", "options": {"a\x1b[31m": {"type": "string"}}}, "is not an option id"),
])
def test_malformed_metadata_is_refused_naming_the_field(tmp_path: Path, data: object,
                                                        field: str) -> None:
    with pytest.raises(ImageBuildFailed, match=f"feature ./x: devcontainer-feature.json {field}"
                       if field.startswith("field") else field):
        metadata.read(_folder(tmp_path, data), "./x")


def test_a_feature_needs_a_regular_install_sh(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"id": "x"}, install=False)
    os.symlink("/bin/sh", tmp_path / "install.sh")
    with pytest.raises(ImageBuildFailed, match="install.sh is missing or not a regular file"):
        metadata.read(folder, "./x")


def test_metadata_through_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_text('{"id": "x"}')
    os.symlink(tmp_path / "real.json", tmp_path / "devcontainer-feature.json")
    (tmp_path / "install.sh").write_text("")
    with pytest.raises(ImageBuildFailed, match="cannot read devcontainer-feature.json"):
        metadata.read(str(tmp_path), "./x")
