"""Where spec.build may lead, checked at validation (no engine needed): inside the manifest's
directory tree, or under security.allowedBuildRoots; refused with file, line and field, and
nothing recorded, otherwise."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from tests.conftest import Cli

SECRET = "canary-build-5e1f"


def _write(project: Path, build: str, *, image: bool = False, backend: str = "container"
           ) -> Path:
    project.mkdir(parents=True, exist_ok=True)
    manifest = project / "cell.yaml"
    manifest.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: built}}
        spec:
          backend: {backend}
          {"image: devcell/busybox:latest" if image else ""}
          env:
            - {{name: TOKEN, value: {SECRET}, secret: true}}
          build: {build}
        """))
    return manifest


def _context(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "Dockerfile").write_text("FROM devcell/busybox:latest\n")
    return path


def test_a_context_inside_the_tree_is_stored_as_the_absolute_path_it_resolves_to(
        cli: Cli, tmp_path: Path) -> None:
    _context(tmp_path / "p" / "app")
    # The fake backend records the cell (no engine touched) and says it cannot build.
    manifest = _write(tmp_path / "p", "{context: sub/../app, args: {V: '1'}}", backend="fake")
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 1
    assert "the fake backend cannot build images (spec.build)" in applied.stderr
    spec = json.loads(cli("get", "cell", "built", "-o", "json").stdout)["spec"]
    assert spec["build"] == {"context": str(tmp_path / "p" / "app"), "dockerfile": "Dockerfile",
                             "args": {"V": "1"}}


def test_dot_dot_out_of_the_manifests_tree_is_refused_with_file_line_and_field(
        cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    _context(tmp_path / "outside")
    manifest = _write(tmp_path / "p", "{context: ../outside}")
    result = cli("apply", "-f", str(manifest))
    assert result.returncode == 1
    assert f"{manifest}:9:20: Cell \"built\": spec.build.context:" in result.stderr
    assert "lies outside the manifest's directory" in result.stderr
    assert "allowedBuildRoots" in result.stderr and "nothing was changed" in result.stderr
    assert not (state_dir / "state.db").exists()


def test_a_symbolic_link_out_of_the_tree_is_refused(cli: Cli, tmp_path: Path) -> None:
    _context(tmp_path / "outside")
    (tmp_path / "p").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "p" / "app")
    manifest = _write(tmp_path / "p", "{context: app}")
    result = cli("apply", "-f", str(manifest))
    assert result.returncode == 1
    assert f"resolves to {tmp_path / 'outside'}" in result.stderr
    assert "spec.build.context" in result.stderr


def test_a_dockerfile_outside_the_context_may_lie_where_a_context_may(
        cli: Cli, tmp_path: Path) -> None:
    _context(tmp_path / "p" / "app")
    (tmp_path / "p" / "Dockerfile.dev").write_text("FROM scratch\n")  # docker build -f ../
    manifest = _write(tmp_path / "p", "{context: app, dockerfile: ../Dockerfile.dev}")
    result = cli("apply", "-f", str(manifest), "--dry-run")
    assert result.returncode == 0, result.stderr
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    manifest = _write(tmp_path / "p", "{context: app, dockerfile: ../../Dockerfile}")
    result = cli("apply", "-f", str(manifest))
    assert result.returncode == 1
    assert (f"spec.build.dockerfile: ../../Dockerfile (resolves to {tmp_path / 'Dockerfile'}) "
            "lies outside the build context") in result.stderr
    assert "allowedBuildRoots" in result.stderr


def test_the_configuration_can_allow_a_root_outside_the_tree(
        cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    _context(tmp_path / "shared" / "images" / "py")
    manifest = _write(tmp_path / "p", f"{{context: {tmp_path}/shared/images/py}}")
    assert cli("apply", "-f", str(manifest), "--dry-run").returncode == 1
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = state_dir / "config.yaml"
    config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n"
                      f"  allowedBuildRoots: [{tmp_path}/shared]\n")
    config.chmod(0o600)
    result = cli("apply", "-f", str(manifest), "--dry-run")
    assert result.returncode == 0, result.stderr


def test_image_and_build_together_or_neither_are_refused_without_quoting_the_spec(
        cli: Cli, tmp_path: Path) -> None:
    _context(tmp_path / "p")
    both = cli("apply", "-f", str(_write(tmp_path / "p", "{context: .}", image=True)))
    assert both.returncode == 1
    assert 'spec.build: give "image" or "build", not both' in both.stderr
    neither = tmp_path / "q.yaml"
    neither.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: n}\n"
                       f"spec:\n  backend: container\n  env: [{{name: T, value: {SECRET}, "
                       "secret: true}]\n")
    result = cli("apply", "-f", str(neither))
    assert result.returncode == 1
    assert 'spec.image: missing required field "image" or "build"' in result.stderr
    assert SECRET not in both.stderr + result.stderr


def test_a_context_that_becomes_a_link_out_of_the_tree_after_apply_is_not_built(
        cli: Cli, tmp_path: Path) -> None:
    # Admitted while inside the tree; then, the manifest unchanged, the context directory is
    # swapped for a link to a directory outside it. The controller (the daemon's resync, or a
    # re-apply of the same file) must not build from there: it checks again, not only apply.
    _context(tmp_path / "p" / "app")
    manifest = _write(tmp_path / "p", "{context: app}", backend="fake")
    assert "cannot build images" in cli("apply", "-f", str(manifest)).stderr
    outside = _context(tmp_path / "outside")
    os.rename(tmp_path / "p" / "app", tmp_path / "p" / "app.old")
    os.symlink(outside, tmp_path / "p" / "app")
    cli("apply", "-f", str(manifest))
    cell = json.loads(cli("get", "cell", "built", "-o", "json").stdout)
    [ready] = [c for c in cell["status"]["conditions"] if c["type"] == "Ready"]
    assert ready["reason"] == "ImageBuildFailed"
    assert f"resolves to {outside}" in ready["message"]
    assert "lies outside the manifest's directory" in ready["message"]
