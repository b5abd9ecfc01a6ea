"""`devcell exec`, `devcell logs` and `devcell image build-base`, run as a user runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests import processes
from tests.backends.engine import IMAGE
from tests.conftest import REPO, Cli

CANARY = "canary-cli-7f3a9c"


def _manifest(tmp_path: Path, backend: str = "container") -> Path:
    path = tmp_path / "cell.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: box}}
        spec:
          backend: {backend}
          image: {IMAGE}
          network: {{mode: none}}
          env:
            - {{name: TOKEN, value: {CANARY}, secret: true}}
          services:
            - name: talker
              command: [sh, -c, "echo hello from talker; while true; do sleep 0.2; echo tick; done"]
            - name: quiet
              command: [sleep, "600"]
        """))
    return path


@pytest.fixture
def box(engine: None, cli: Cli, tmp_path: Path, state: Path) -> str:
    applied = cli("apply", "-f", str(_manifest(tmp_path)))
    assert applied.returncode == 0, applied.stderr
    return "box"


def test_exec_passes_output_and_exit_status_through(cli: Cli, box: str) -> None:
    result = cli("exec", box, "--", "sh", "-c", "echo out; echo err >&2; exit 42")
    assert result.returncode == 42
    assert result.stdout == "out\n" and result.stderr == "err\n"
    ok = cli("exec", box, "--", "sh", "-c", 'test "$TOKEN" = ' + CANARY)
    assert ok.returncode == 0, ok.stderr


def test_exec_in_a_sleeping_cell_wakes_it_and_says_so(cli: Cli, box: str) -> None:
    assert cli("cell", "sleep", box).returncode == 0
    result = cli("exec", box, "--", "cat", "/proc/1/cmdline")
    assert result.returncode == 0, result.stderr
    assert "asleep; waking it for exec" in result.stderr and "woken in" in result.stderr
    assert "Traceback" not in result.stderr
    assert cli("get", "cells", box, "-o", "jsonpath={.status.phase}").stdout == "Running"


def test_logs_of_one_service_or_all(cli: Cli, box: str) -> None:
    deadline = time.monotonic() + 10
    while "hello from talker" not in cli("logs", box, "talker").stdout:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    both = cli("logs", box).stdout
    assert "[talker] hello from talker" in both and "[quiet] [devcell" in both
    missing = cli("logs", box, "nope")
    assert missing.returncode == 1 and "no service 'nope'" in missing.stderr


def test_logs_never_follow_what_the_cell_plants_in_its_log_directory(
        cli: Cli, box: str, tmp_path: Path) -> None:
    """The cell writes /var/log/devcell: a link to a host file, a FIFO and a directory named
    like service logs are refused by name; the host file is never printed, nothing hangs."""
    host_secret = tmp_path / "host-secret"
    host_secret.write_text("host-only-8c1d\n")
    host_secret.chmod(0o644)
    planted = cli("exec", box, "--", "sh", "-c",
                  f"ln -s {host_secret} /var/log/devcell/evil.log && "
                  "mkfifo /var/log/devcell/fifo.log && mkdir /var/log/devcell/dir.log")
    assert planted.returncode == 0, planted.stderr
    result = cli("logs", box, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "host-only-8c1d" not in result.stdout + result.stderr
    assert "[talker] hello from talker" in result.stdout
    for name, what in (("evil.log", "a symbolic link"), ("fifo.log", "a FIFO"),
                       ("dir.log", "a directory")):
        assert f"{name} is {what}; not read" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_logs_follow_streams_until_interrupted(box: str, state_dir: Path) -> None:
    env = dict(os.environ, DEVCELL_HOME=str(state_dir))
    proc = subprocess.Popen([sys.executable, "-m", "devcell", "logs", box, "talker", "-f"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO,
                            preexec_fn=processes.child_setup)  # SIGINT reaches it
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(4)]
        assert any(b"tick" in line for line in lines), lines
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        processes.end(proc)


def test_secret_is_not_shown_by_get_or_describe(cli: Cli, box: str) -> None:
    for args in (("get", "cells", "-o", "yaml"), ("get", "cells", "-o", "json"),
                 ("describe", "cell", box), ("get", "events")):
        result = cli(*args)
        assert result.returncode == 0 and CANARY not in result.stdout + result.stderr, args


def test_exec_on_the_fake_backend_is_refused(cli: Cli, tmp_path: Path) -> None:
    assert cli("apply", "-f", str(_manifest(tmp_path, backend="fake"))).returncode == 0
    result = cli("exec", "box", "--", "true")
    assert result.returncode == 1 and "capability exec" in result.stderr


def test_exec_needs_a_command(cli: Cli) -> None:
    result = cli("exec", "box")
    assert result.returncode == 2 and "after --" in result.stderr


def test_build_base_is_idempotent(engine: None, cli: Cli) -> None:
    result = cli("image", "build-base")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"image/{IMAGE} unchanged")


def test_unreachable_engine_from_the_cli(cli: Cli, tmp_path: Path) -> None:
    env = {"DOCKER_HOST": "unix:///nonexistent"}
    applied = cli("apply", "-f", str(_manifest(tmp_path)), env=env)
    assert applied.returncode == 1
    assert "cannot reach the Docker engine at unix:///nonexistent" in applied.stderr
    assert "Traceback" not in applied.stderr
    described = cli("describe", "cell", "box").stdout
    assert "BackendUnavailable" in described
    built = cli("image", "build-base", env=env)
    assert built.returncode == 1 and "Traceback" not in built.stderr


def test_a_missing_image_is_the_condition_reason_with_the_fix(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    path = _manifest(tmp_path)
    # Never: no pull (the default would ask docker.io, and tests talk to loopback only).
    path.write_text(path.read_text().replace(
        f"image: {IMAGE}", "image: devcell/not-built:1\n  imagePullPolicy: Never"))
    applied = cli("apply", "-f", str(path))
    assert applied.returncode == 1 and "Traceback" not in applied.stderr
    assert "imagePullPolicy is Never" in applied.stderr
    assert "devcell image build-base" in applied.stderr
    shown = cli("get", "cell", "box", "-o", "json").stdout
    assert '"reason": "ImageNotFound"' in shown
    # Refused while planning: nothing made, no operation; the event says why.
    assert "ImageNotFound" in cli("describe", "cell", "box").stdout
    assert '"items": []' in cli("get", "operations", "-o", "json").stdout


def test_a_host_mount_the_configuration_allows_reaches_the_cell(
        engine: None, cli: Cli, tmp_path: Path, state: Path, state_dir: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("from the host\n")
    path = tmp_path / "cell.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: dev}}
        spec:
          backend: container
          image: {IMAGE}
          mounts:
            - {{hostPath: {src}, mountPath: /src, readOnly: true}}
        """))
    refused = cli("apply", "-f", str(path))
    assert refused.returncode == 1 and "host bind mounts are off by default" in refused.stderr
    state_dir.mkdir(parents=True, exist_ok=True)
    config = state_dir / "config.yaml"
    config.write_text(f"apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n"
                      f"  allowedHostPaths: [{src}]\n")
    config.chmod(0o600)
    applied = cli("apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    read = cli("exec", "dev", "--", "cat", "/src/README")
    assert read.returncode == 0 and read.stdout == "from the host\n"
    write = cli("exec", "dev", "--", "sh", "-c", "echo x > /src/new")
    assert write.returncode != 0  # read-only as asked
    assert not (src / "new").exists()


def _run_in_terminal(argv: list[str], env: dict[str, str], timeout: float = 120) -> tuple[int, str]:
    """Run argv with a pseudo-terminal as stdout/stderr (as a user at a shell would)."""
    import pty
    import select

    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
                            env=env, cwd=REPO, close_fds=True, preexec_fn=processes.child_setup)
    os.close(follower)
    chunks = []
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # the follower side closed: the process is gone
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=10), b"".join(chunks).decode(errors="replace")
    finally:
        os.close(leader)
        processes.end(proc)


def test_a_long_checkpoint_shows_a_progress_bar_in_a_terminal(
        cli: Cli, box: str, state_dir: Path) -> None:
    filled = cli("exec", box, "--", "sh", "-c",
                 "for i in $(seq 1 96); do head -c 1048576 /dev/zero > /workspace/blob$i; done")
    assert filled.returncode == 0, filled.stderr
    env = dict(os.environ, DEVCELL_HOME=str(state_dir), COLUMNS="120")
    code, shown = _run_in_terminal(
        [sys.executable, "-m", "devcell", "snapshot", "create", box, "--name", "big"], env)
    assert code == 0, shown
    assert "box: checkpoint snap_" in shown  # the bar's description, drawn while copying
    assert "MB" in shown
    piped = cli("snapshot", "create", box, "--name", "big2")
    assert piped.returncode == 0 and "checkpoint snap_" not in piped.stderr  # no terminal: no bar


WRITE_EVERY_WAY = """
cd /workspace
printf 'XXXX' | dd of=rewrite conv=notrunc 2>/dev/null
: > truncate
echo more >> append
echo replaced > new && mv new renamed
ln link-me alias && echo through-the-link >> alias
chmod 600 chmod-me
echo fork-only > created
"""
NAMES = ("rewrite", "truncate", "append", "renamed", "link-me", "chmod-me")


def _listing(cli: Cli, cell: str) -> str:
    shown = cli("exec", cell, "--", "sh", "-c",
                "cd /workspace && for f in *; do ls -ln $f; cat $f; done")
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_a_fork_is_an_overlay_that_never_changes_its_snapshot_or_parent(
        cli: Cli, box: str, state: Path) -> None:
    """A fork costs nothing up front (an overlay on the snapshot's checkpoint): whatever the
    fork's processes do to its files, its snapshot and its parent stay as they were; after a
    reboot (the mount gone) its start mounts it again; it outlives its parent cell."""
    made = cli("exec", box, "--", "sh", "-c", "cd /workspace && for f in " + " ".join(NAMES)
               + "; do echo original-$f > $f; done")
    assert made.returncode == 0, made.stderr
    assert cli("snapshot", "create", box, "--name", "s1").returncode == 0
    parent = _listing(cli, box)
    (checkpoint,) = state.glob("images/checkpoints/*/workspace")
    saved = {p.name: (p.read_bytes(), p.stat().st_mode) for p in checkpoint.iterdir()}
    forked = cli("cell", "fork", box, "--snapshot", "s1", "--name", "f")
    assert forked.returncode == 0, forked.stderr
    assert "overlay on its snapshot's checkpoint" in cli("describe", "cell", "f").stdout
    wrote = cli("exec", "f", "--", "sh", "-c", WRITE_EVERY_WAY)
    assert wrote.returncode == 0, wrote.stderr
    mine = _listing(cli, "f")
    assert "through-the-link" in mine and "-rw-------" in mine and "fork-only" in mine
    assert _listing(cli, box) == parent, "the parent did not change"
    assert {p.name: (p.read_bytes(), p.stat().st_mode) for p in checkpoint.iterdir()} == saved

    (volume,) = [v for v in state.glob("volumes/*/upper") if any(v.iterdir())]
    # a reboot: the container stops and the mount is gone
    subprocess.run(["umount", "-l", str(volume.parent / "workspace")], check=True)
    names = subprocess.run(["docker", "ps", "-q", "--filter", "name=^devcell-f-"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert len(names) == 1
    subprocess.run(["docker", "stop", "-t", "1", *names], capture_output=True, check=True)
    assert cli("cell", "start", "f").returncode == 0
    assert _listing(cli, "f") == mine, "mounted again before the container started"
    assert cli("delete", "cell", box, "--approve").returncode == 0
    assert _listing(cli, "f") == mine, "the fork outlives its parent cell"
    assert cli("delete", "cell", "f", "--approve").returncode == 0
    assert not any(state.glob("volumes/vol_*"))


def test_fork_count_makes_working_cells_each_on_the_snapshot(cli: Cli, box: str) -> None:
    """`cell fork --count 3`: three running cells, each with the snapshot's files and its
    own writes (an overlay each); about 4 s (three container starts)."""
    wrote = cli("exec", box, "--", "sh", "-c", "echo from-parent > /workspace/seed")
    assert wrote.returncode == 0, wrote.stderr
    assert cli("snapshot", "create", box, "--name", "s1").returncode == 0
    forked = cli("cell", "fork", box, "--snapshot", "s1", "--name", "exp", "--count", "3")
    assert forked.returncode == 0, forked.stderr
    assert forked.stdout.splitlines()[:3] == [f"cell/exp-{k} created" for k in (1, 2, 3)]
    for k in (1, 2, 3):
        mine = cli("exec", f"exp-{k}", "--", "sh", "-c",
                   f"echo mine-{k} > /workspace/own && cat /workspace/seed /workspace/own")
        assert mine.returncode == 0, mine.stderr
        assert mine.stdout == f"from-parent\nmine-{k}\n"
    again = cli("exec", "exp-1", "--", "cat", "/workspace/own")
    assert again.stdout == "mine-1\n", "each fork writes its own overlay"
    for k in (1, 2, 3):
        assert cli("delete", "cell", f"exp-{k}", "--approve").returncode == 0
