"""The features' build context: one COPY and RUN per feature in order, options shell-quoted,
containerEnv as ENV, entrypoints chained; rewritten file by file so an unchanged cell keeps
every timestamp (the build digest cache then answers from a walk); a link in a local
feature refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from devcell.backends.features import context, fetch, metadata
from devcell.errors import ImageBuildFailed
from devcell.manifests import feature_refs


def _resolved(tmp_path: Path, fid: str, **meta: object) -> fetch.Resolved:
    folder = tmp_path / fid
    folder.mkdir()
    (folder / "devcontainer-feature.json").write_text(json.dumps({"id": fid, **meta}))
    (folder / "install.sh").write_text("#!/bin/sh\n")
    return fetch.Resolved(feature_refs.parse(str(folder)), fid, str(folder), "",
                          metadata.read(str(folder), fid))


def test_the_dockerfile_installs_in_order_and_sets_what_features_ask(tmp_path: Path) -> None:
    steps = [context.Step(_resolved(tmp_path, "a", containerEnv={"P": "/a:${PATH}"}),
                          {"OPT": "it's"}),
             context.Step(_resolved(tmp_path, "b", entrypoint="/usr/local/bin/b-init"), {})]
    (tmp_path / "state").mkdir()
    folder = Path(context.write(tmp_path / "state", "web", "debian:12", steps))
    dockerfile = (folder / "Dockerfile").read_text().splitlines()
    assert dockerfile[:2] == ["FROM debian:12", "USER root"]
    assert [line.split()[1] for line in dockerfile if line.startswith("COPY")] == ["f0/", "f1/"]
    assert 'ENV P="/a:${PATH}"' in dockerfile
    assert dockerfile[-1] == 'ENTRYPOINT ["/bin/sh", "-c", "/usr/local/bin/b-init\\nexec \\"$@\\"", "-"]'
    assert (folder / "f0" / "options.env").read_text() == "OPT='it'\"'\"'s'\n"
    assert (folder / "f1" / "feature" / "install.sh").exists()


def test_an_unchanged_context_keeps_its_files_and_a_gone_feature_is_removed(
        tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    a, b = _resolved(tmp_path, "a"), _resolved(tmp_path, "b")
    folder = Path(context.write(tmp_path / "state", "web", "x", [context.Step(a, {}),
                                                                  context.Step(b, {})]))
    before = {p: os.lstat(p).st_mtime_ns for p in folder.rglob("*")}
    context.write(tmp_path / "state", "web", "x", [context.Step(a, {}), context.Step(b, {})])
    assert {p: os.lstat(p).st_mtime_ns for p in folder.rglob("*")} == before
    context.write(tmp_path / "state", "web", "x", [context.Step(a, {})])
    assert not (folder / "f1").exists()


def test_a_link_in_a_local_feature_is_refused(tmp_path: Path) -> None:
    a = _resolved(tmp_path, "a")
    os.symlink("/etc/passwd", Path(a.folder) / "passwd")
    (tmp_path / "state").mkdir()
    with pytest.raises(ImageBuildFailed, match="passwd is not a regular file or directory"):
        context.write(tmp_path / "state", "web", "x", [context.Step(a, {})])
