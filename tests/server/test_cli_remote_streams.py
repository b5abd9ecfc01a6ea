"""`devcell exec` and `devcell logs` through the API (cli/remote_streams.py) against the
session's real server, with a container cell: each command line run on the daemon's state
directory and again through its unix socket and its TLS listener gives the same standard
output, standard error and exit code (-i's input, both streams, the exit status, -e/-w, a
tail, a service, errors); a follow ended by Ctrl-C, a sleeping cell woken for exec (said on
stderr as exec says it), a viewer refused naming the rule, and flags not served.

Cost: ~10-15 s (one busybox container, ~2 s to start; each exec ~0.3 s), Docker needed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.server.conftest import Api, running_container_cell
from tests.server.test_cli_remote import Run, _runner, admin_token, files  # noqa: F401

LINES = 5


@pytest.fixture(scope="module")
def box(api: Api) -> Iterator[str]:
    """A running container cell whose one service wrote LINES lines, then waits."""
    from devcell import Client

    with running_container_cell(
            api, "rbox", f"'i=0; while [ $i -lt {LINES} ]; do i=$((i+1)); echo tick $i; done; "
            "sleep 100000'") as name, Client(f"unix:{api.socket}") as dc:
        deadline = time.monotonic() + 20
        while not any(f"tick {LINES}" in line for line in dc.logs(name, "ticker")):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        yield name


@pytest.fixture(params=["unix", "tls"])
def remote(request: pytest.FixtureRequest, api: Api, admin_token: Path,  # noqa: F811
           capsys: pytest.CaptureFixture[str]) -> Run:
    if request.param == "unix":
        return _runner(capsys, ["--server", f"unix:{api.socket}"])
    return _runner(capsys, ["--server", api.url, "--token-file", str(admin_token),
                            "--certificate-authority", str(api.certificate)])


SAME = [
    ["exec", "{box}", "--", "sh", "-c", "echo out; echo err >&2; exit 3"],
    ["exec", "-e", "GREETING=hi", "-e", "B=a=b", "-w", "/tmp", "{box}", "--", "sh", "-c",
     'echo "$GREETING $B"; pwd'],
    ["exec", "{box}", "--", "head", "-c", "300000", "/dev/zero"],
    ["exec", "-i", "{box}", "--", "sh", "-c", "wc -l; exit 7"],
    ["exec", "{box}", "--", "no-such-command"],
    ["exec", "nope-{box}", "--", "true"], ["exec", "{box}"], ["exec", "-e", "1=x", "{box}",
                                                              "--", "true"],
    ["exec", "-w", "rel", "{box}", "--", "true"], ["exec", "-t", "{box}", "--", "true"],
    ["logs", "{box}"], ["logs", "{box}", "ticker"], ["logs", "{box}", "--tail", "2"],
    ["logs", "{box}", "ticker", "--tail", "1", "--timestamps"],
    ["logs", "{box}", "--since", "1h"], ["logs", "{box}", "--since", "2000-01-01T00:00:00Z"],
    ["logs", "{box}", "nope"], ["logs", "nope-{box}"], ["logs", "{box}", "--since", "1x"],
]


def test_the_same_output_as_on_the_state_directory(
        api: Api, box: str, remote: Run, capsys: pytest.CaptureFixture[str],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    direct = _runner(capsys, ["--state-dir", str(api.state)])
    data = tmp_path / "input"
    data.write_bytes(b"".join(b"line %d\n" % k for k in range(30000)))  # many messages
    differ = []
    for words in SAME:
        argv = [w.replace("{box}", box) for w in words]
        results = []
        for run in (direct, remote):
            with open(data, "rb") as given:
                monkeypatch.setattr(sys, "stdin", os.fdopen(os.dup(given.fileno()), "r"))
                results.append(run(argv))
                sys.stdin.close()
        if results[0] != results[1]:
            differ.append((argv, *results))
    assert not differ, "\n".join(f"{a}:\n  direct {h}\n  remote {t}" for a, h, t in differ)


def test_a_follow_ends_with_ctrl_c_and_a_sleeping_cell_is_woken(
        api: Api, box: str, remote: Run, tmp_path: Path) -> None:
    follow = subprocess.Popen(
        [sys.executable, "-m", "devcell", "--server", f"unix:{api.socket}", "logs", "-f", box,
         "ticker", "--tail", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline() == f"tick {LINES}\n".encode()
        follow.send_signal(signal.SIGINT)
        assert follow.wait(15) == 0, follow.stderr.read() if follow.stderr else ""
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert remote(["cell", "sleep", box])[0] == 0
    code, out, err = remote(["exec", box, "--", "echo", "awake"])
    assert (code, out) == (0, "awake\n")
    assert err.startswith(f"cell {box} is asleep; waking it for exec...\ncell {box} woken in ")


def test_what_is_refused(api: Api, box: str, tmp_path: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "token"
    token.write_text(api.token("cli-streams-viewer", "viewer"))
    token.chmod(0o600)
    viewer = _runner(capsys, ["--server", api.url, "--token-file", str(token),
                              "--certificate-authority", str(api.certificate)])
    for argv in (["exec", box, "--", "true"], ["logs", box]):
        code, out, err = viewer(argv)
        assert (code, out) == (1, ""), argv
        assert err.startswith("error: ") and "refused by rule viewer-read-only" in err, err
    admin = _runner(capsys, ["--server", f"unix:{api.socket}"])
    code, out, err = admin(["logs", box, "--sidecar", "db"])
    assert (code, out) == (2, "") and "--sidecar is not served" in err
