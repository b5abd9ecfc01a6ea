"""spec.security on the real engine: a capability, a security option and a device the
configuration allows are the cell's (CapEff, Seccomp and NoNewPrivs of its processes,
/dev/fuse), refused without the allowance, and gone again when the manifest stops asking for
them (the container is recreated, the workspace kept); no-new-privileges=false lifts
DevCell's no-new-privileges."""

from __future__ import annotations

from pathlib import Path

from tests.backends.container.support import IMAGE
from tests.conftest import Cli

SYS_PTRACE = 19  # the capability's bit in /proc/PID/status


def _status(cli: Cli) -> dict[str, str]:
    shown = cli("exec", "dbg", "--", "cat", "/proc/self/status")
    assert shown.returncode == 0, shown.stderr
    return dict(line.split(":\t", 1) for line in shown.stdout.splitlines() if ":\t" in line)


def _effective(cli: Cli) -> int:
    return int(_status(cli)["CapEff"], 16)


def test_an_allowed_capability_is_the_cells_and_refused_without_the_allowance(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    manifest = tmp_path / "dbg.yaml"
    plain = ("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: dbg}\nspec:\n"
             f"  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
             "  services:\n    - name: idle\n      command: [sleep, '600']\n")
    manifest.write_text(plain + "  security:\n    capabilities: [SYS_PTRACE]\n"
                        "    securityOpt: [seccomp=unconfined]\n    devices: [/dev/fuse]\n")
    refused = cli("apply", "-f", str(manifest))
    assert refused.returncode != 0
    assert "spec.security.capabilities[0]" in refused.stderr
    assert "security.allowedCapabilities" in refused.stderr
    state.mkdir(parents=True, exist_ok=True)
    config = state / "config.yaml"
    config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                      "security: {allowedCapabilities: [SYS_PTRACE], allowedSecurityOpts: "
                      "[seccomp=unconfined, no-new-privileges=false], allowedDevices: "
                      "[/dev/fuse]}\n")
    config.chmod(0o600)
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    status = _status(cli)
    assert int(status["CapEff"], 16) & (1 << SYS_PTRACE)
    assert status["Seccomp"].strip() == "0" and status["NoNewPrivs"].strip() == "1"
    assert cli("exec", "dbg", "--", "test", "-c", "/dev/fuse").returncode == 0
    assert cli("exec", "dbg", "--", "sh", "-c", "echo kept > /workspace/note").returncode == 0
    manifest.write_text(plain + "  security: {securityOpt: [no-new-privileges=false]}\n")
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert not _effective(cli) & (1 << SYS_PTRACE)  # recreated without them
    status = _status(cli)
    assert status["Seccomp"].strip() == "2" and status["NoNewPrivs"].strip() == "0"
    assert cli("exec", "dbg", "--", "test", "-e", "/dev/fuse").returncode != 0
    assert cli("exec", "dbg", "--", "cat", "/workspace/note").stdout == "kept\n"
