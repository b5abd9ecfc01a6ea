"""Ready means serving, on the real engine through the CLI (issue 30 part 4): a readiness
check holds Ready and `wait` until the port answers, a crash loop makes Ready False with its
reason, `cell restart CELL SERVICE` and `cell rerun-hooks` work in the cell and are
recorded. Each test makes one busybox container; the readiness test waits about 8 s for its
server on purpose, the others a few seconds."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.backends.engine import IMAGE
from tests.conftest import Cli

ASK = "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc 127.0.0.1 8080 | head -n 1"


def _manifest(directory: Path, name: str, services: str, hooks: str = "") -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: {name}}}
        spec:
          backend: container
          image: {IMAGE}
          network: {{mode: none}}
        """) + textwrap.indent(hooks + services, "  "))
    return path


def _ready(cli: Cli, name: str) -> dict[str, str]:
    cell = json.loads(cli("get", "cell", name, "-o", "json").stdout)
    found: dict[str, str] = next(c for c in cell["status"]["conditions"] if c["type"] == "Ready")
    return found


def test_a_readiness_check_holds_ready_and_wait_until_the_port_answers(
        cli: Cli, tmp_path: Path, engine: None, state: Path) -> None:
    services = textwrap.dedent("""\
        services:
          - name: web
            command: [sh, -c, "sleep 8; mkdir -p /www; echo hi > /www/index.html;
                              exec httpd -f -p 8080 -h /www"]
            ready:
              httpGet: {port: 8080, path: /}
              periodSeconds: 1
        """)
    applied = cli("apply", "-f", str(_manifest(tmp_path, "served", services)))
    assert applied.returncode == 0, applied.stderr
    ready = _ready(cli, "served")
    assert (ready["status"], ready["reason"]) == ("False", "ServiceNotReady"), ready
    waited = cli("wait", "cell", "served", "--for=condition=Ready", "--timeout", "120s",
                 timeout=180)
    assert waited.returncode == 0, waited.stderr
    # wait returned: the server answers.
    answer = cli("exec", "served", "--", "sh", "-c", ASK)
    assert answer.stdout.startswith("HTTP/1.1 200"), answer
    wide = cli("get", "cells", "served", "-o", "wide").stdout
    assert "web:ready" in wide


def test_a_crash_loop_makes_ready_false_with_the_reason_and_restart_is_recorded(
        cli: Cli, tmp_path: Path, engine: None, state: Path) -> None:
    services = textwrap.dedent("""\
        services:
          - name: broken
            command: [no-such-program]
          - name: idle
            command: [sleep, "600"]
        """)
    applied = cli("apply", "-f", str(_manifest(tmp_path, "looping", services)))
    assert applied.returncode == 0, applied.stderr
    # Its first exit is a restart to come; exiting again soon after makes it a crash loop.
    # Each wait observes the cell once more (the loop is bounded by the tries, not a clock).
    for _ in range(60):
        waited = cli("wait", "cell", "looping", "--for=condition=Ready=False", "--timeout",
                     "120s", timeout=180)
        assert waited.returncode == 0, waited.stderr
        ready = _ready(cli, "looping")
        if ready["reason"] == "ServiceCrashLooping":
            break
    assert ready["reason"] == "ServiceCrashLooping", ready
    assert "service broken" in ready["message"] and "status 127" in ready["message"]
    wide = cli("get", "cells", "looping", "-o", "wide").stdout
    assert "broken:crash-looping" in wide and "idle:running" in wide
    described = cli("describe", "cell", "looping").stdout
    assert "broken:crash-looping" in described

    restarted = cli("cell", "restart", "looping", "idle")
    assert restarted.returncode == 0, restarted.stderr
    log = cli("exec", "looping", "--", "cat", "/var/log/devcell/idle.log").stdout
    assert log.count("starting idle") == 2, log
    ops = cli("get", "operations", "-o", "json").stdout
    assert '"restart"' in ops


def test_rerun_hooks_after_a_fix_starts_the_held_services(
        cli: Cli, tmp_path: Path, engine: None, state: Path) -> None:
    hooks = textwrap.dedent("""\
        hooks:
          postCreate:
            - [sh, -c, "test -e /workspace/fixed || { echo missing fix; exit 2; }"]
        """)
    services = textwrap.dedent("""\
        services:
          - name: app
            command: [sleep, "600"]
        """)
    manifest = _manifest(tmp_path, "fixme", services, hooks)
    assert cli("apply", "-f", str(manifest)).returncode == 1
    assert _ready(cli, "fixme")["reason"] == "PostCreateFailed"
    assert cli("exec", "fixme", "--", "touch", "/workspace/fixed").returncode == 0
    rerun = cli("cell", "rerun-hooks", "fixme")
    assert rerun.returncode == 0, rerun.stderr
    waited = cli("wait", "cell", "fixme", "--for=condition=Ready", "--timeout", "120s",
                 timeout=180)
    assert waited.returncode == 0, waited.stderr
    log = cli("exec", "fixme", "--", "cat", "/var/log/devcell/app.log").stdout
    assert log.count("starting app") == 1, log
    described = cli("describe", "cell", "fixme").stdout
    assert "rerun-hooks" in described and "PostCreate:" in described
