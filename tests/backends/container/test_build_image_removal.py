"""Deleting a cell built from a Dockerfile removes the image DevCell built for it (found by
its label for this state directory and the tags a build of this cell gives), so nothing of it
is left for `gc` or `df` to miss; an image someone else made from it, or labelled for
another state directory, is never touched (issue 31 item 6)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from tests.backends.container.test_build import _project, built_images
from tests.conftest import Cli

__all__ = ["built_images"]  # the fixture, used by name


def test_deleting_a_built_cell_removes_the_image_devcell_built_for_it(
        cli: Cli, tmp_path: Path, built_images: Any, docker_client: Any, state: Path) -> None:
    manifest = _project(tmp_path)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    (image,) = built_images()
    # Someone else's image beside it, with DevCell's labels for another state directory and
    # this cell's name: never touched.
    foreign = docker_client.images.build(
        fileobj=io.BytesIO(
            f"FROM {image['RepoTags'][0]}\nLABEL dev.devcell.state-dir=other\n".encode()),
        tag="devcell-test/not-ours:1", rm=True)[0]
    # A tag a user added to DevCell's image is theirs: it stays, and with it the image.
    docker_client.images.get(image["Id"]).tag("devcell-test/mine", "1")
    try:
        deleted = cli("delete", "cell", "built", "--approve")
        assert deleted.returncode == 0, deleted.stderr
        assert [t for i in built_images() for t in i["RepoTags"]] == ["devcell-test/mine:1"]
        tags = [t for i in docker_client.images.list() for t in i.tags]
        assert "devcell-test/not-ours:1" in tags and "devcell-test/mine:1" in tags
        assert docker_client.images.get(image["Id"]).tags == ["devcell-test/mine:1"]
        dry = cli("gc", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "devcell-build/" not in dry.stdout
    finally:
        docker_client.images.remove(foreign.id, force=True)
        docker_client.images.remove("devcell-test/mine:1", force=True)


def test_a_built_image_another_cell_runs_is_kept(
        cli: Cli, tmp_path: Path, built_images: Any) -> None:
    manifest = _project(tmp_path)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    (image,) = built_images()
    tag = image["RepoTags"][0]
    other = tmp_path / "other.yaml"
    other.write_text(f"""\
apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {{name: other}}
spec:
  backend: container
  image: {tag}
  services: [{{name: idle, command: [sleep, "600"]}}]
""")
    assert cli("apply", "-f", str(other)).returncode == 0
    deleted = cli("delete", "cell", "built", "--approve")
    assert deleted.returncode == 0, deleted.stderr
    assert [i["RepoTags"] for i in built_images()] == [[tag]]
    assert cli("exec", "other", "--", "cat", "/built").stdout == "built at step two\n"
