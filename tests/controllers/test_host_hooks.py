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
