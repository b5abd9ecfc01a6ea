"""hooks.postCreate before services, and a failed postCreate that leaves the cell running, on
the real engine through the CLI (issue 30 part 4). Each test makes one busybox container
(a few seconds)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.backends.engine import IMAGE
from tests.conftest import Cli


def _manifest(directory: Path, post_create: str) -> Path:
    path = directory / "hooked.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: hooked}}
        spec:
          backend: container
          image: {IMAGE}
          hooks:
            postCreate:
              - {post_create}
          services:
            - name: needs
              command: [sh, -c, "cat /workspace/made || exit 3; exec sleep 600"]
        """))
    return path


def test_a_service_needing_post_creates_output_starts_once(
        cli: Cli, tmp_path: Path, engine: None, state: Path) -> None:
    # The hook takes a while: a service started before it would find nothing and exit 3.
    hook = '[sh, -c, "sleep 2; echo made > /workspace/made"]'
    applied = cli("apply", "-f", str(_manifest(tmp_path, hook)))
    assert applied.returncode == 0, applied.stderr
    # The gate opened as the hook ended; the supervisor starts the service a moment later.
    waited = cli("wait", "cell", "hooked", "--for=condition=Ready", "--timeout", "120s",
                 timeout=180)
    assert waited.returncode == 0, waited.stderr
    log = cli("exec", "hooked", "--", "cat", "/var/log/devcell/needs.log").stdout
    assert "needs waits for the postCreate hooks" in log
    assert log.count("starting needs") == 1, log
    assert "exited with status" not in log, log
    assert "made" in log


def test_a_failed_post_create_leaves_the_cell_running_enterable_and_not_retried(
        cli: Cli, tmp_path: Path, engine: None, state: Path) -> None:
    hook = '[sh, -c, "echo tried >> /workspace/tries; echo cannot fetch deps >&2; exit 4"]'
    manifest = _manifest(tmp_path, hook)
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 1, applied.stdout
    assert "Traceback" not in applied.stderr
    cell = json.loads(cli("get", "cell", "hooked", "-o", "json").stdout)
    assert cell["status"]["phase"] == "Running"
    ready = next(c for c in cell["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PostCreateFailed")
    assert "exited with status 4" in ready["message"]
    assert "cannot fetch deps" in ready["message"]
    # Enterable, and the service is held (it would exit 3 without the hook's file).
    entered = cli("exec", "hooked", "--", "cat", "/workspace/tries")
    assert (entered.returncode, entered.stdout) == (0, "tried\n")
    log = cli("exec", "hooked", "--", "cat", "/var/log/devcell/needs.log").stdout
    assert "starting needs" not in log
    described = cli("describe", "cell", "hooked").stdout
    assert "PostCreate:" in described and "cannot fetch deps" in described
    # A plain re-apply does not run the hook again.
    cli("apply", "-f", str(manifest))
    assert cli("exec", "hooked", "--", "cat", "/workspace/tries").stdout == "tried\n"
