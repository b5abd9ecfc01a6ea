"""What apply and diff say about a cell built from a Dockerfile, against the real engine: a
change to the build's inputs alone is a difference `diff` shows (exit 1) and `apply` reports
`rebuilt`; a container stopped behind DevCell's back is `repaired`; an unchanged re-apply
stays `unchanged`. (issue 31 item 6)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from devcell.reconciler import lease
from tests.backends.container.test_build import _containers, _project, built_images
from tests.conftest import REPO, Cli
from tests.processes import child_setup, end

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
    dry = cli("apply", "-f", str(manifest), "--dry-run")
    assert dry.stdout == "cell/built rebuilt (dry run)\n", dry.stderr
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


def test_with_a_daemon_apply_says_rebuilt_and_waits_for_the_rebuild(
        cli: Cli, tmp_path: Path, built_images: Any, docker_client: Any, state: Path) -> None:
    """The daemon reconciles: apply records the change of the build's inputs where the daemon
    sees it (the cell waits for its rebuild) and returns once the new image runs."""
    manifest = _project(tmp_path)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    empty = tmp_path / "gitops"
    empty.mkdir()
    env = dict(os.environ, DEVCELL_HOME=str(state))
    with (tmp_path / "daemon.log").open("wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "devcell", "controller", "run", "--manifests", str(empty),
             "--resync", "0"], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log,
            preexec_fn=child_setup)
    try:
        deadline = time.monotonic() + 30
        while lease.current_holder(state) is None:
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.2)
        dockerfile = manifest.parent / "app" / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text() + "RUN echo three > /three\n")
        applied = cli("apply", "-f", str(manifest))
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout == "cell/built rebuilt\n"
        assert cli("exec", "built", "--", "cat", "/three").stdout == "three\n"
        assert len(_containers(docker_client, state)) == 1
    finally:
        end(daemon)


def test_a_no_op_reapply_of_a_built_cell_never_imports_the_docker_sdk(
        cli: Cli, tmp_path: Path, built_images: Any, state: Path) -> None:
    """Its build's digest is answered by the cache (a walk with lstat): no SDK, no build."""
    manifest = _project(tmp_path)
    assert cli("apply", "-f", str(manifest)).returncode == 0
    time.sleep(2.5)  # older than the digest cache's racy window
    assert cli("apply", "-f", str(manifest)).stdout == "cell/built unchanged\n"  # cached now
    env = dict(os.environ, DEVCELL_HOME=str(state))
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "devcell", "apply", "-f",
                          str(manifest)], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=60)
    assert out.returncode == 0 and out.stdout == "cell/built unchanged\n", out.stderr
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines()}
    assert not {m for m in imported if m.split(".")[0] in ("docker", "requests", "urllib3")}
