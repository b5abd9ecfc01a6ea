"""The digest that names a built image (container_build.digest): it covers exactly what the
build sends, as docker-py's own .dockerignore matcher selects it, and never follows a link.
No engine: the digest is taken on the host."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devcell.backends.container import build as container_build
from devcell.errors import ImageBuildFailed


@pytest.fixture
def context(tmp_path: Path) -> Path:
    root = tmp_path / "ctx"
    (root / "src").mkdir(parents=True)
    (root / "Dockerfile").write_text("FROM devcell/busybox:latest\nCOPY . /src\n")
    (root / "src" / "main.py").write_text("print('hi')\n")
    (root / ".dockerignore").write_text("# outputs\nbuild/\n*.log\n!keep.log\n")
    (root / "build").mkdir()
    (root / "build" / "out.bin").write_bytes(b"\0" * 10)
    (root / "debug.log").write_text("noise\n")
    (root / "keep.log").write_text("kept\n")
    return root


def _digest(root: Path, **extra: object) -> str:
    return container_build.digest({"context": str(root), "dockerfile": "Dockerfile", **extra})


def test_same_content_same_digest_and_each_sent_change_moves_it(context: Path) -> None:
    first = _digest(context)
    assert _digest(context) == first
    (context / "src" / "main.py").write_text("print('bye')\n")
    second = _digest(context)
    assert second != first
    os.chmod(context / "src" / "main.py", 0o755)  # the mode is sent in the archive
    third = _digest(context)
    assert third != second
    (context / "src" / "new.py").write_text("")
    assert _digest(context) != third


def test_files_dockerignore_excludes_do_not_move_it_and_exceptions_do(context: Path) -> None:
    first = _digest(context)
    (context / "build" / "out.bin").write_bytes(b"\1" * 10)
    (context / "debug.log").write_text("more noise\n")
    (context / "other.log").write_text("new and ignored\n")
    assert _digest(context) == first
    (context / "keep.log").write_text("changed\n")
    assert _digest(context) != first
    (context / ".dockerignore").write_text("build/\n")  # the ignore file itself is sent
    assert _digest(context) != first


def test_args_target_and_dockerfile_are_part_of_it(context: Path) -> None:
    plain = _digest(context)
    assert _digest(context, args={"V": "1"}) != plain
    assert _digest(context, args={"V": "1"}) != _digest(context, args={"V": "2"})
    assert _digest(context, target="dev") != plain
    (context / "Dockerfile.dev").write_text("FROM devcell/busybox:latest\n")
    assert container_build.digest({"context": str(context), "dockerfile": "Dockerfile.dev"}) \
        != plain


def test_a_link_is_hashed_as_its_target_never_followed(context: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("one\n")
    os.symlink(outside, context / "src" / "link")
    first = _digest(context)
    outside.write_text("two\n")  # what the link points to is not sent: nothing moves
    assert _digest(context) == first
    os.remove(context / "src" / "link")
    os.symlink(tmp_path / "elsewhere", context / "src" / "link")
    assert _digest(context) != first


def test_a_context_that_is_gone_is_an_image_build_failure(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildFailed, match="is not a directory"):
        _digest(tmp_path / "missing")
    (tmp_path / "ctx").mkdir()
    os.symlink("/etc/passwd", tmp_path / "ctx" / ".dockerignore")
    with pytest.raises(ImageBuildFailed, match=r"\.dockerignore"):
        _digest(tmp_path / "ctx")


def test_the_tag_is_per_state_directory_and_cell() -> None:
    tag = container_build.tag_for("0123456789abcdef", "api", "f" * 64)
    assert tag == f"devcell-build/0123456789ab/api:{'f' * 32}"


def test_a_dockerfile_outside_the_context_is_part_of_it(context: Path) -> None:
    outside = context.parent / "docker" / "Dockerfile"
    outside.parent.mkdir()
    outside.write_text("FROM devcell/busybox:latest\n")
    first = _digest(context, dockerfile="../docker/Dockerfile")
    assert first == _digest(context, dockerfile="../docker/Dockerfile")
    outside.write_text("FROM devcell/busybox:latest\nRUN true\n")
    assert _digest(context, dockerfile="../docker/Dockerfile") != first
