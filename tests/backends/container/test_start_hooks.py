"""spec.hooks.postCreate and postStart on the real engine, through the CLI: postCreate once
after the runtime's first start, postStart after every start, a failure fails the start."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.backends.engine import IMAGE
from tests.conftest import Cli


def _manifest(directory: Path, *, state: str = "Running", post_start: str = "") -> Path:
    path = directory / "hooked.yaml"
    post_start = post_start or '[sh, -c, "echo start >> /workspace/log"]'
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: hooked}}
        spec:
          backend: container
          image: {IMAGE}
          state: {state}
          env: [{{name: GREETING, value: hi}}]
          hooks:
            postCreate:
              - [sh, -c, "echo create-$GREETING >> /workspace/log"]
            postStart:
              - {post_start}
          services:
            - name: idle
              command: [sleep, "600"]
        """))
    return path


def test_post_create_runs_once_and_post_start_at_every_start(
        cli: Cli, tmp_path: Path, engine: None, state: Path) -> None:
    applied = cli("apply", "-f", str(_manifest(tmp_path)))
    assert applied.returncode == 0, applied.stderr
    assert cli("exec", "hooked", "--", "cat", "/workspace/log").stdout == "create-hi\nstart\n"
    assert cli("apply", "-f", str(_manifest(tmp_path, state="Stopped"))).returncode == 0
    assert cli("apply", "-f", str(_manifest(tmp_path))).returncode == 0
    log = cli("exec", "hooked", "--", "cat", "/workspace/log").stdout
    assert log == "create-hi\nstart\nstart\n"


def test_a_failing_post_start_hook_fails_the_start_with_its_output(
        cli: Cli, tmp_path: Path, engine: None, state: Path) -> None:
    failing = '[sh, -c, "echo cannot reach the database; exit 7"]'
    applied = cli("apply", "-f", str(_manifest(tmp_path, post_start=failing)))
    assert applied.returncode == 1
    assert "Traceback" not in applied.stderr
    cell = json.loads(cli("get", "cell", "hooked", "-o", "json").stdout)
    ready = cell["status"]["conditions"][0]
    assert ready["status"] == "False"
    assert "postStart hook" in ready["message"] and "exited with status 7" in ready["message"]
    assert "cannot reach the database" in ready["message"]
    assert cell["status"]["phase"] != "Running"
