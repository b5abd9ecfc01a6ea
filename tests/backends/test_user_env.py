"""spec.userEnvProbe's shell (backends/user_env.py) run by the real supervisor script in a
busybox container, one container for every case (~2 s): what the profile sets or changes
reaches `--exec`, spec.env's values win, a command's own variables stay, values with quotes
and newlines survive, secrets are never written to the probe's file, and a cell without the
probe waits for nothing."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from devcell.backends import supervisor
from tests.backends.engine import IMAGE, require_engine

PROFILE = """\
export FROM_PROFILE="it's
two lines"
export PATH="/opt/tool/bin:$PATH"
export PLAIN=from-profile
export TOKEN=from-profile
"""


def test_the_probe_through_the_supervisor(tmp_path: Path) -> None:
    require_engine()
    import docker

    spec = {"userEnvProbe": "loginShell", "services": [],
            "env": [{"name": "PLAIN", "value": "from-spec"},
                    {"name": "TOKEN", "value": "s3cret", "secret": True}]}
    run = tmp_path / "run"
    run.mkdir()
    (run / supervisor.SCRIPT).write_text(supervisor.render_script("probe", spec))
    (run / supervisor.SECRETS).write_text(supervisor.render_secrets({"TOKEN": "s3cret"}))
    (tmp_path / "profile").write_text(PROFILE)
    client = docker.from_env(timeout=60)
    container = client.containers.run(
        IMAGE, ["/bin/sh", f"/devcell/{supervisor.SCRIPT}"], detach=True,
        network_mode="none", environment={"PLAIN": "from-spec"},
        labels={"dev.devcell.test": f"user-env-{uuid.uuid4().hex[:8]}"},
        volumes={str(run): {"bind": "/devcell", "mode": "ro"},
                 str(tmp_path / "profile"): {"bind": "/etc/profile", "mode": "ro"}})
    try:
        def run_exec(command: str, **env: str) -> str:
            code, out = container.exec_run(
                supervisor.exec_argv(["/bin/sh", "-c", command]), environment=env)
            assert code == 0, out
            return str(out.decode())

        began = time.monotonic()
        seen = run_exec('printf "%s|%s|%s|%s|%s" "$FROM_PROFILE" "$PATH" "$PLAIN" "$TOKEN" '
                        '"$OWN"', OWN="mine")
        assert seen == ("it's\ntwo lines|/opt/tool/bin:/usr/local/sbin:/usr/local/bin:"
                        "/usr/sbin:/usr/bin:/sbin:/bin|from-spec|s3cret|mine")
        kept = run_exec("cat /tmp/.devcell-userenv-*")
        assert "FROM_PROFILE" in kept and "s3cret" not in kept and "PLAIN" not in kept
        assert time.monotonic() - began < 8
        _, out = container.exec_run(
            supervisor.exec_argv(["/bin/sh", "-c", 'echo "[$FROM_PROFILE]"']), user="nobody")
        assert out.decode() == "[]\n"  # another user's file is never sourced
    finally:
        container.remove(force=True)
        client.close()
    assert "devcell_userenv" not in supervisor.render_script("plain", {"services": []})

