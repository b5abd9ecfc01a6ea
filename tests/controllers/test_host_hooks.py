"""spec.hooks.hostInitialize (devcontainer.json's initializeCommand) through `devcell apply`
on the fake backend: run on the host in the manifest's folder before each start, said first
and recorded as a step; never on a no-op re-apply; a failure fails the start; refused
without the configuration's allowance and for a manifest read from standard input."""

from __future__ import annotations

from pathlib import Path

from tests.api.test_devcontainer_lifecycle import HOST_CELL, _allow_host_commands
from tests.conftest import Cli


def test_runs_before_each_start_in_the_manifests_folder(cli: Cli, state_dir: Path,
                                                         tmp_path: Path) -> None:
    _allow_host_commands(state_dir)
    project = tmp_path / "project"
    project.mkdir()
    (project / "cell.yaml").write_text(HOST_CELL)
    applied = cli("apply", "-f", str(project / "cell.yaml"))
    assert applied.returncode == 0, applied.stderr
    assert "cell hosted: running on the host (hooks.hostInitialize, in " \
        f"{project}): sh -c 'pwd > initialized'" in applied.stderr
    assert (project / "initialized").read_text() == f"{project}\n"
    steps = cli("get", "operations", "-o", "yaml").stdout
    assert steps.index("host-initialize") < steps.index("create-volume") < steps.index("start")
    (project / "initialized").unlink()
    again = cli("apply", "-f", str(project / "cell.yaml"))
    assert again.returncode == 0 and not (project / "initialized").exists()
    restarted = cli("cell", "restart", "hosted")
    assert restarted.returncode == 0, restarted.stderr
    assert (project / "initialized").exists()


def test_a_failure_fails_the_start_and_names_the_command(cli: Cli, state_dir: Path,
                                                         tmp_path: Path) -> None:
    _allow_host_commands(state_dir)
    (tmp_path / "cell.yaml").write_text(HOST_CELL.replace(
        '"pwd > initialized"', '"echo no token; exit 3"'))
    applied = cli("apply", "-f", str(tmp_path / "cell.yaml"))
    assert applied.returncode != 0
    assert "hooks.hostInitialize sh -c 'echo no token; exit 3' of cell hosted exited with " \
        "status 3: no token" in applied.stderr
    assert "Traceback" not in applied.stderr


def test_refused_without_the_allowance_and_from_standard_input(cli: Cli, state_dir: Path,
                                                               tmp_path: Path) -> None:
    (tmp_path / "cell.yaml").write_text(HOST_CELL)
    refused = cli("apply", "-f", str(tmp_path / "cell.yaml"))
    assert refused.returncode != 0 and not (tmp_path / "initialized").exists()
    assert "cell.yaml:7" in refused.stderr and "spec.hooks.hostInitialize" in refused.stderr
    assert "security.allowHostCommands: true" in refused.stderr
    _allow_host_commands(state_dir)
    piped = cli("apply", "-f", "-", input=HOST_CELL)
    assert piped.returncode != 0
    assert "read from standard input; apply it from a file" in piped.stderr


def _allow_host_commands_and_paths(state_dir: Path, root: Path) -> None:
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (state_dir / "config.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n  allowHostCommands: true\n"
        f"  allowedHostPaths: ['{root}']\n")
    (state_dir / "config.yaml").chmod(0o600)


LIVE_CELL = """\
apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {name: hosted}
spec:
  backend: fake
  workspace:
    source: {hostPath: {path: %s}}
  hooks:
    hostInitialize: [%s]
"""


def test_refused_where_the_cell_writes_what_runs_on_the_host(cli: Cli, state_dir: Path,
                                                              tmp_path: Path) -> None:
    """A cell binding the manifest's folder live (or a folder a command names) could rewrite
    the script the host runs at the next start: a way out of the cell onto the host."""
    _allow_host_commands_and_paths(state_dir, tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "init.sh").write_text("touch ran\n")
    (project / "cell.yaml").write_text(LIVE_CELL % (project, "[sh, ./init.sh]"))
    refused = cli("apply", "-f", str(project / "cell.yaml"))
    assert refused.returncode != 0 and not (project / "ran").exists()
    assert "spec.hooks.hostInitialize" in refused.stderr
    assert "spec.workspace.source.hostPath.path" in refused.stderr
    assert "Traceback" not in refused.stderr
    elsewhere = tmp_path / "manifests"
    elsewhere.mkdir()
    (elsewhere / "cell.yaml").write_text(LIVE_CELL % (project, f"[sh, -c, 'sh {project}/init.sh']"))
    named = cli("apply", "-f", str(elsewhere / "cell.yaml"))
    assert named.returncode != 0 and not (elsewhere / "ran").exists()
    assert f"{project}/init.sh" in named.stderr
    (elsewhere / "cell.yaml").write_text(LIVE_CELL % (project, "[sh, -c, 'touch ran']"))
    fine = cli("apply", "-f", str(elsewhere / "cell.yaml"))
    assert fine.returncode == 0, fine.stderr
    assert (elsewhere / "ran").exists()


def test_refused_where_another_cell_writes_what_runs_on_the_host(
        cli: Cli, state_dir: Path, tmp_path: Path) -> None:
    """Another cell binding the manifest's folder live could rewrite the script too: refused
    at the binding cell's apply, at the commanding cell's apply, and before each run."""
    _allow_host_commands_and_paths(state_dir, tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "init.sh").write_text("touch ran\n")
    (project / "cell.yaml").write_text(HOST_CELL.replace(
        '[sh, -c, "pwd > initialized"]', "[sh, ./init.sh]"))
    first = cli("apply", "-f", str(project / "cell.yaml"))
    assert first.returncode == 0, first.stderr
    assert (project / "ran").exists()
    (project / "ran").unlink()
    (tmp_path / "other.yaml").write_text(LIVE_CELL.replace("hosted", "binder").replace(
        "  hooks:\n    hostInitialize: [%s]\n", "") % project)
    bound = cli("apply", "-f", str(tmp_path / "other.yaml"))
    assert bound.returncode != 0
    assert "cell hosted's hooks.hostInitialize could be changed by this cell" in bound.stderr
    assert "spec.workspace.source.hostPath.path" in bound.stderr
    assert cli("delete", "cell", "hosted").returncode == 0
    bound = cli("apply", "-f", str(tmp_path / "other.yaml"))
    assert bound.returncode == 0, bound.stderr
    again = cli("apply", "-f", str(project / "cell.yaml"))
    assert again.returncode != 0 and not (project / "ran").exists()
    assert "cell binder's spec.workspace.source.hostPath.path" in again.stderr
