"""Readiness checks rendered into the supervisor (backends/probes.py, supervisor.py): valid
POSIX shell, Kubernetes' defaults, the user's command quoted, nothing added without checks,
and the postCreate gate only where the backend opens it. The rendered scripts are run for
real by tests/backends/container/test_services_ready.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

from devcell.backends import probes, supervisor

CHECKED = {"name": "web", "command": ["httpd", "-f"],
           "ready": {"exec": {"command": ["sh", "-c", "test -e '/tmp/it s'; echo $HOME"]},
                     "periodSeconds": 2}}


def _valid_shell(script: str, tmp_path: Path) -> None:
    path = tmp_path / "supervisor.sh"
    path.write_text(script)
    checked = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True,
                             check=False)
    assert checked.returncode == 0, checked.stderr


def test_checks_render_with_kubernetes_defaults_and_quoted_commands(tmp_path: Path) -> None:
    spec = {"services": [CHECKED, {"name": "db", "command": ["pg"], "ready": {
        "tcpSocket": {"port": 5432}}}, {"name": "plain", "command": ["sleep", "9"]}]}
    script = supervisor.render_script("api", spec)
    _valid_shell(script, tmp_path)
    assert "probe_0() { sh -c 'test -e '\"'\"'/tmp/it s'\"'\"'; echo $HOME'; }" in script
    assert 'probe_1() { tcp_ok 5432 "$1"; }' in script
    assert "supervise web Always '0 0 2 1 1 3' httpd -f &" in script
    assert "supervise plain Always '' sleep 9 &" in script
    assert probes.timing({}) == {"initialDelaySeconds": 0, "periodSeconds": 10,
                                 "timeoutSeconds": 1, "successThreshold": 1,
                                 "failureThreshold": 3}


def test_no_checks_no_helpers_and_the_gate_only_when_asked(tmp_path: Path) -> None:
    spec = {"hooks": {"postCreate": [["make"]]},
            "services": [{"name": "plain", "command": ["sleep", "9"]}]}
    plain = supervisor.render_script("api", spec)
    _valid_shell(plain, tmp_path)
    assert "watch_ready()" not in plain and supervisor.GATE not in plain
    gated = supervisor.render_script("api", spec, gated=True)
    _valid_shell(gated, tmp_path)
    assert f"while [ ! -e /devcell/{supervisor.GATE} ]" in gated
    assert gated.index(supervisor.GATE) < gated.index("supervise plain")
