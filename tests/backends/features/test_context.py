"""The features' build context: one COPY and RUN per feature in order, options shell-quoted,
containerEnv as ENV, entrypoints chained; rewritten file by file so an unchanged cell keeps
every timestamp (the build digest cache then answers from a walk); a link in a local
feature refused; the walk by directory descriptors (a local feature may lie in a folder
a cell writes: a directory swapped for a link mid-walk, or the folder itself as a link, never
leads the copy to a host file)."""

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
    assert dockerfile[:3] == ["FROM debian:12", "ARG DEVCELL_IMAGE_USER=root", "USER root"]
    assert dockerfile[-1] == "USER ${DEVCELL_IMAGE_USER}"  # the base image's, given at build
    assert [line.split()[1] for line in dockerfile if line.startswith("COPY")] == ["f0/", "f1/"]
    assert 'ENV P="/a:${PATH}"' in dockerfile
    assert dockerfile[-2] == 'ENTRYPOINT ["/bin/sh", "-c", "/usr/local/bin/b-init\\nexec \\"$@\\"", "-"]'
    assert (folder / "f0" / "options.env").read_text().startswith("OPT='it'\"'\"'s'\n")
    assert (folder / "f1" / "feature" / "install.sh").exists()


def test_a_context_is_written_once_and_an_old_one_goes_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "state").mkdir()
    a, b = _resolved(tmp_path, "a"), _resolved(tmp_path, "b")
    both = [context.Step(a, {}), context.Step(b, {})]
    folder = Path(context.write(tmp_path / "state", "web", "x", both))
    before = {p: os.lstat(p).st_mtime_ns for p in folder.rglob("*")}
    assert Path(context.write(tmp_path / "state", "web", "x", both)) == folder
    assert {p: os.lstat(p).st_mtime_ns for p in folder.rglob("*")} == before
    fewer = Path(context.write(tmp_path / "state", "web", "x", [context.Step(a, {})]))
    assert fewer != folder and folder.exists()  # a build may still read it
    monkeypatch.setattr(context, "STALE_SECONDS", -1.0)
    context.write(tmp_path / "state", "web", "x", [context.Step(a, {})])
    assert not folder.exists() and sorted(fewer.parent.iterdir()) == [fewer]
    context.forget(tmp_path / "state", "web")
    assert not fewer.parent.exists()


@pytest.mark.parametrize("umask", [0o077, 0o000], ids=["umask 077", "umask 000"])
def test_the_context_has_the_same_modes_under_any_umask(tmp_path: Path, umask: int) -> None:
    """Its directories were mkdir(0o755) through the umask: 0700 under a umask of 077 (the
    files were chmodded, the directories not), and COPY keeps them, so a feature whose
    install.sh copies its lib/ for the image's user (cp -r) left it unreadable to them."""
    a = _resolved(tmp_path, "a")
    (Path(a.folder) / "lib").mkdir()
    (Path(a.folder) / "lib" / "x.sh").write_text("echo\n")
    (tmp_path / "state").mkdir()
    old = os.umask(umask)
    try:
        folder = Path(context.write(tmp_path / "state", "web", "x", [context.Step(a, {})]))
    finally:
        os.umask(old)
    assert {str(p.relative_to(folder)): p.stat().st_mode & 0o7777 for p in folder.rglob("*")
            } == {"Dockerfile": 0o644, "f0": 0o755, "f0/options.env": 0o644,
                  "f0/feature": 0o755, "f0/feature/devcontainer-feature.json": 0o644,
                  "f0/feature/install.sh": 0o644, "f0/feature/lib": 0o755,
                  "f0/feature/lib/x.sh": 0o644}
    assert folder.stat().st_mode & 0o7777 == 0o755


def test_a_context_written_with_0700_directories_is_mended_and_a_right_one_left_alone(
        tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    steps = [context.Step(_resolved(tmp_path, "a"), {})]
    folder = Path(context.write(tmp_path / "state", "web", "x", steps))
    before = {p: os.lstat(p).st_ctime_ns for p in folder.rglob("*")}
    assert Path(context.write(tmp_path / "state", "web", "x", steps)) == folder
    assert {p: os.lstat(p).st_ctime_ns for p in folder.rglob("*")} == before
    for directory in (folder / "f0", folder / "f0" / "feature"):
        directory.chmod(0o700)  # as an earlier DevCell wrote it under a umask of 077
    context.write(tmp_path / "state", "web", "x", steps)
    assert (folder / "f0").stat().st_mode & 0o7777 == 0o755
    assert (folder / "f0" / "feature").stat().st_mode & 0o7777 == 0o755


def test_a_link_in_a_local_feature_is_refused(tmp_path: Path) -> None:
    a = _resolved(tmp_path, "a")
    os.symlink("/etc/passwd", Path(a.folder) / "passwd")
    (tmp_path / "state").mkdir()
    with pytest.raises(ImageBuildFailed, match="passwd is not a regular file or directory"):
        context.write(tmp_path / "state", "web", "x", [context.Step(a, {})])


def _feature(root: Path) -> Path:
    folder = root / "feature"
    (folder / "sub").mkdir(parents=True)
    (folder / "install.sh").write_text("#!/bin/sh\n")
    (folder / "install.sh").chmod(0o755)
    (folder / "sub" / "secret").write_text("the feature's own\n")
    return folder


def test_copies_regular_files_and_directories(tmp_path: Path) -> None:
    tree = context._tree(str(_feature(tmp_path)), "f")
    assert tree == {"install.sh": (b"#!/bin/sh\n", 0o755), "sub": None,
                    "sub/secret": (b"the feature's own\n", 0o644)}


def test_a_link_in_the_folder_or_the_folder_as_a_link_is_refused(tmp_path: Path) -> None:
    folder = _feature(tmp_path)
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "secret").write_text("the host's\n")
    (tmp_path / "linked").symlink_to(folder)
    with pytest.raises(ImageBuildFailed, match="a link is not followed"):
        context._tree(str(tmp_path / "linked"), "f")
    (folder / "key").symlink_to(tmp_path / "host" / "secret")
    with pytest.raises(ImageBuildFailed, match="key is not a regular file"):
        context._tree(str(folder), "f")


def test_a_directory_swapped_for_a_link_while_read_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cell swaps sub for a link to a host folder holding a file of the same name just
    after the walk saw sub as a directory."""
    folder = _feature(tmp_path)
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "secret").write_text("the host's\n")
    real_stat = os.stat

    def swapping_stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        found = real_stat(path, *args, **kwargs)  # type: ignore[arg-type]
        if path == "sub" and (folder / "sub").is_dir() and not (folder / "sub").is_symlink():
            os.rename(folder / "sub", tmp_path / "moved")
            (folder / "sub").symlink_to(tmp_path / "host")
        return found

    monkeypatch.setattr(os, "stat", swapping_stat)
    with pytest.raises(ImageBuildFailed, match="sub changed while read"):
        context._tree(str(folder), "f")
