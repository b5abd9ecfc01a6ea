"""spec.security on the real engine: a capability the configuration allows is the cell's
(CapEff of its processes), refused without the allowance, and gone again when the manifest
stops asking for it (the container is recreated, the workspace kept)."""

from __future__ import annotations

from pathlib import Path

from tests.backends.container.support import IMAGE
from tests.conftest import Cli

SYS_PTRACE = 19  # the capability's bit in /proc/PID/status


def _effective(cli: Cli) -> int:
    shown = cli("exec", "dbg", "--", "grep", "CapEff", "/proc/self/status")
    assert shown.returncode == 0, shown.stderr
    return int(shown.stdout.split()[1], 16)


def test_an_allowed_capability_is_the_cells_and_refused_without_the_allowance(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    manifest = tmp_path / "dbg.yaml"
    plain = ("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: dbg}\nspec:\n"
             f"  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
             "  services:\n    - name: idle\n      command: [sleep, '600']\n")
    manifest.write_text(plain + "  security: {capabilities: [SYS_PTRACE]}\n")
    refused = cli("apply", "-f", str(manifest))
    assert refused.returncode != 0
    assert "spec.security.capabilities[0]" in refused.stderr
    assert "security.allowedCapabilities" in refused.stderr
    state.mkdir(parents=True, exist_ok=True)
    config = state / "config.yaml"
    config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                      "security: {allowedCapabilities: [SYS_PTRACE]}\n")
    config.chmod(0o600)
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert _effective(cli) & (1 << SYS_PTRACE)
    assert cli("exec", "dbg", "--", "sh", "-c", "echo kept > /workspace/note").returncode == 0
    manifest.write_text(plain)
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert not _effective(cli) & (1 << SYS_PTRACE)  # recreated without it
    assert cli("exec", "dbg", "--", "cat", "/workspace/note").stdout == "kept\n"
