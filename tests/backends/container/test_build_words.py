"""What apply and diff say about a cell built from a Dockerfile, against the real engine: a
change to the build's inputs alone is a difference `diff` shows (exit 1) and `apply` reports
`rebuilt`; a container stopped behind DevCell's back is `repaired`; an unchanged re-apply
stays `unchanged`. (issue 31 item 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.backends.container.test_build import _containers, _project, built_images
from tests.conftest import Cli

__all__ = ["built_images"]  # the fixture, used by name


def test_a_changed_dockerfile_alone_is_a_difference_and_apply_says_rebuilt(
        cli: Cli, tmp_path: Path, built_images: Any, docker_client: Any, state: Path) -> None:
    manifest = _project(tmp_path)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    same = cli("diff", "-f", str(manifest))
    assert (same.returncode, same.stdout) == (0, ""), same.stderr
    again = cli("apply", "-f", str(manifest))
    assert again.stdout == "cell/built unchanged\n", again.stderr
    before = _containers(docker_client, state)

    dockerfile = manifest.parent / "app" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo two > /two\n")
    shown = cli("diff", "-f", str(manifest))
    assert shown.returncode == 1, shown.stderr
    assert "devcell-build/" in shown.stdout and "\n-" in shown.stdout and "\n+" in shown.stdout
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout == "cell/built rebuilt\n"
    after = _containers(docker_client, state)
    assert len(after) == 1 and after[0].id != before[0].id
    assert cli("exec", "built", "--", "cat", "/two").stdout == "two\n"
    settled = cli("diff", "-f", str(manifest))
    assert (settled.returncode, settled.stdout) == (0, ""), settled.stderr
    assert cli("apply", "-f", str(manifest)).stdout == "cell/built unchanged\n"


def test_a_built_cell_stopped_behind_devcells_back_is_repaired(
        cli: Cli, tmp_path: Path, built_images: Any, docker_client: Any, state: Path) -> None:
    manifest = _project(tmp_path)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    (container,) = _containers(docker_client, state)
    container.stop(timeout=1)
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout == "cell/built repaired\n"
    container.reload()
    assert container.status == "running"
