"""spec.build against the real engine, through the CLI as a user runs it: a Dockerfile FROM the
base image with RUN steps is built, tagged by its context's digest, rebuilt (and the cell
recreated) only when what the build sends changes, .dockerignore honoured; a failing build
is a reason on Ready, never a traceback."""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.host.ids import state_hash
from tests.backends.engine import IMAGE
from tests.conftest import Cli

DOCKERFILE = f"""\
FROM {IMAGE}
COPY greeting.txt /etc/greeting
RUN echo "built at step two" > /built && cat /etc/greeting > /copied
"""


@pytest.fixture
def built_images(engine: None, state: Path) -> Iterator[Any]:
    """The engine's images labelled as built for this test's state directory (removed after)."""
    import docker

    client = docker.from_env(timeout=120)
    label = f"dev.devcell.state-dir={state_hash(state)}"

    def listed() -> list[dict[str, Any]]:
        found = client.api.images(filters={"label": [label]})
        return [i for i in found if i.get("RepoTags")]

    yield listed
    from tests.backends.engine import remove_containers

    remove_containers(state)
    for image in client.api.images(filters={"label": [label]}):
        client.api.remove_image(image["Id"], force=True)
    client.close()


def _project(tmp_path: Path, name: str = "built") -> Path:
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "Dockerfile").write_text(DOCKERFILE)
    (project / "app" / "greeting.txt").write_text("hello v1\n")
    manifest = project / "cell.yaml"
    manifest.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: {name}}}
        spec:
          backend: container
          build:
            context: app
          services:
            - name: idle
              command: [sleep, "600"]
        """))
    return manifest


def _builds(cli: Cli, name: str) -> int:
    """How many build-image steps the cell's operations recorded."""
    shown = cli("describe", "cell", name)
    assert shown.returncode == 0, shown.stderr
    return sum(1 for line in shown.stdout.splitlines()
               if re.match(r"\s+\d+\. build-image\s+Succeeded", line))


def _containers(client: Any, state: Path) -> list[Any]:
    return list(client.containers.list(
        all=True, filters={"label": f"dev.devcell.state-dir={state_hash(state)}"}))


def test_a_dockerfile_from_the_base_image_is_built_with_its_run_steps(
        cli: Cli, tmp_path: Path, built_images: Any, state: Path) -> None:
    manifest = _project(tmp_path)
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert cli("exec", "built", "--", "cat", "/built").stdout == "built at step two\n"
    assert cli("exec", "built", "--", "cat", "/copied").stdout == "hello v1\n"
    images = built_images()
    assert len(images) == 1
    tag = images[0]["RepoTags"][0]
    assert tag.startswith("devcell-build/") and "/built:" in tag
    # One label, this state directory's: each label is a build step of its own (a container
    # made and committed), and nothing of a cell in it lets two cells share the image.
    ours = {k: v for k, v in images[0]["Labels"].items() if k.startswith("dev.devcell")}
    assert ours == {"dev.devcell.state-dir": state_hash(state)}
    assert _builds(cli, "built") == 1
    shown = cli("get", "cell", "built", "-o", "json").stdout
    assert json.loads(shown)["status"]["conditions"][0]["status"] == "True"


def test_an_unchanged_context_is_not_built_again_and_a_change_rebuilds_and_recreates(
        cli: Cli, tmp_path: Path, built_images: Any, docker_client: Any, state: Path) -> None:
    manifest = _project(tmp_path)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    first = built_images()
    before = _containers(docker_client, state)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    assert _builds(cli, "built") == 1
    assert built_images() == first
    same = _containers(docker_client, state)
    assert [c.id for c in same] == [c.id for c in before]

    (manifest.parent / "app" / "greeting.txt").write_text("hello v2\n")
    again = cli("apply", "-f", str(manifest))
    assert again.returncode == 0, again.stderr
    assert _builds(cli, "built") == 2
    assert len(built_images()) == 2
    assert cli("exec", "built", "--", "cat", "/copied").stdout == "hello v2\n"
    after = _containers(docker_client, state)
    assert len(after) == 1 and after[0].id != before[0].id  # recreated from the new image

    # A third build removes the first image (no container uses it any more), never the one
    # the running container still uses: at most two builds of a cell are kept.
    (manifest.parent / "app" / "greeting.txt").write_text("hello v3\n")
    assert cli("apply", "-f", str(manifest)).returncode == 0
    kept = built_images()
    assert _builds(cli, "built") == 3 and len(kept) == 2
    assert first[0]["Id"] not in {i["Id"] for i in kept}
    assert cli("exec", "built", "--", "cat", "/copied").stdout == "hello v3\n"


def test_dockerignore_is_honoured_a_change_to_an_ignored_file_does_not_rebuild(
        cli: Cli, tmp_path: Path, built_images: Any) -> None:
    manifest = _project(tmp_path)
    app = manifest.parent / "app"
    (app / ".dockerignore").write_text("# build outputs\nnotes/\n*.log\n!keep.log\n")
    (app / "notes").mkdir()
    (app / "notes" / "todo.md").write_text("one\n")
    (app / "debug.log").write_text("noise\n")
    (app / "keep.log").write_text("kept\n")
    (app / "Dockerfile").write_text(DOCKERFILE + "COPY . /ctx\n")
    assert cli("apply", "-f", str(manifest)).returncode == 0
    listing = cli("exec", "built", "--", "ls", "-a", "/ctx").stdout.split()
    assert "keep.log" in listing and "debug.log" not in listing and "notes" not in listing

    (app / "notes" / "todo.md").write_text("two\n")
    (app / "debug.log").write_text("more noise\n")
    assert cli("apply", "-f", str(manifest)).returncode == 0
    assert _builds(cli, "built") == 1 and len(built_images()) == 1

    (app / "keep.log").write_text("changed\n")  # re-included by `!keep.log`: sent, so rebuilt
    assert cli("apply", "-f", str(manifest)).returncode == 0
    assert _builds(cli, "built") == 2
    assert cli("exec", "built", "--", "cat", "/ctx/keep.log").stdout == "changed\n"


def test_a_failing_build_is_a_reason_on_ready_with_the_step_output_escaped(
        cli: Cli, tmp_path: Path, built_images: Any) -> None:
    manifest = _project(tmp_path)
    (manifest.parent / "app" / "Dockerfile").write_text(
        f"FROM {IMAGE}\nRUN printf 'compiler says \\033[31mno\\n' && exit 3\n")
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 1
    assert "Traceback" not in applied.stderr
    assert "\x1b" not in applied.stderr and "\x1b" not in applied.stdout
    cell = json.loads(cli("get", "cell", "built", "-o", "json").stdout)
    ready = cell["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "ImageBuildFailed")
    assert "compiler says \\x1b[31mno" in ready["message"]
    assert "failed at Step 2/" in ready["message"] and "RUN printf" in ready["message"]
    assert "returned a non-zero code: 3" in ready["message"]
    assert built_images() == []


def test_a_missing_context_directory_is_refused_before_anything_is_recorded(
        cli: Cli, tmp_path: Path) -> None:
    manifest = _project(tmp_path)
    os.rename(manifest.parent / "app", manifest.parent / "elsewhere")
    result = cli("apply", "-f", str(manifest))
    assert result.returncode == 1
    assert "cell.yaml:7:14" in result.stderr and "spec.build.context" in result.stderr
    assert "is not a directory" in result.stderr


def _second_cell(tmp_path: Path, manifest: Path, name: str) -> Path:
    """Another cell of the same state directory built from `manifest`'s context."""
    other = manifest.parent / f"{name}.yaml"
    other.write_text(manifest.read_text().replace("name: built", f"name: {name}"))
    return other


def test_a_second_cell_from_the_same_context_shares_the_image_and_keeps_it_when_one_goes(
        cli: Cli, tmp_path: Path, built_images: Any, docker_client: Any) -> None:
    """Two cells of one state directory built from one context get one image (every step of
    the second build cached, the label included: nothing of a cell is in the image), under
    a tag each; deleting one removes only its tag, and the other still runs from the image.
    Cost: two cached builds and two container starts (~5 s)."""
    manifest = _project(tmp_path)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    second = cli("apply", "-f", str(_second_cell(tmp_path, manifest, "twin")))
    assert second.returncode == 0, second.stderr
    (image,) = built_images()
    tags = sorted(image["RepoTags"])
    assert len(tags) == 2 and "/built:" in tags[0] and "/twin:" in tags[1]
    deleted = cli("delete", "cell", "built", "--approve")
    assert deleted.returncode == 0, deleted.stderr
    assert [i["RepoTags"] for i in built_images()] == [[tags[1]]]
    assert cli("exec", "twin", "--", "cat", "/built").stdout == "built at step two\n"
    assert cli("delete", "cell", "twin", "--approve").returncode == 0
    assert built_images() == []


def test_a_container_someone_runs_from_a_built_image_is_not_taken_for_the_cells(
        cli: Cli, tmp_path: Path, built_images: Any, docker_client: Any) -> None:
    """Labels are inherited: a container made from a built image carries the image's. The
    image carries none that makes a container DevCell's (managed, cell id), so the cell's
    container is still found alone (no "several containers carry the labels" refusal), and
    deleting the cell leaves the stranger running. Cost: one build, one container (~4 s)."""
    manifest = _project(tmp_path)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    (image,) = built_images()
    stranger = docker_client.containers.run(image["RepoTags"][0], ["sleep", "600"],
                                            detach=True, network_mode="none")
    try:
        again = cli("apply", "-f", str(manifest))
        assert again.returncode == 0, again.stderr
        assert cli("exec", "built", "--", "cat", "/built").stdout == "built at step two\n"
        assert cli("delete", "cell", "built", "--approve").returncode == 0
        stranger.reload()
        assert stranger.status == "running"
    finally:
        stranger.remove(force=True)


def test_a_dockerfile_outside_the_context_is_built(
        cli: Cli, tmp_path: Path, built_images: Any) -> None:
    """(A change to it rebuilds: test_build_digest*.py check the digest and its cache.)"""
    manifest = _project(tmp_path)
    (manifest.parent / "app" / "Dockerfile").unlink()
    outside = manifest.parent / "Dockerfile.dev"  # docker build -f ../Dockerfile.dev app
    outside.write_text(DOCKERFILE)
    manifest.write_text(manifest.read_text().replace(
        "context: app", "context: app\n    dockerfile: ../Dockerfile.dev"))
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert cli("exec", "built", "--", "cat", "/copied").stdout == "hello v1\n"
