"""End-to-end fixtures: containers a test's CLI runs made are removed after the test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import processes
from tests.backends.engine import remove_containers
from tests.conftest import REPO, Cli


@pytest.fixture(autouse=True)
def _remove_test_containers(state_dir: Path) -> Iterator[None]:
    yield
    if (state_dir / "containers").is_dir():  # only tests that used the container backend
        remove_containers(state_dir)


SERVED_MODULES = ("test_cli", "test_kubectl_habits", "test_kubectl_verbs", "test_examples",
                  "test_bad_input", "test_apply_own_output", "test_gc_says_what_it_did",
                  "test_transfer_cli", "test_import_devcontainer", "test_features")
"""The e2e modules run again through the API (issue 27: the CLI's e2e suite through
--server): each of their tests' commands the API serves goes through a daemon's unix socket
(`devcell --server unix:SOCK ...`), then its TLS listener, every other command
(`import devcontainer`, `controller`, ...) to the state directory, as an admin on the server's
machine would run them. The e2e modules left out: the heavy matrices and the daemon's own
tests (a serving daemon would hold their daemon's lease), test_interrupt (Ctrl-C to an
apply converging in its own process: a served apply converges nothing), test_suspend_resume
and test_restore_daemon (they start and stop their own daemon), test_images (their own
daemons, `delete --approve`, DOCKER_CONFIG given to the CLI's process, image commands),
test_devcontainer_lifecycle and test_import_devcontainer_compose (build contexts relative to
the manifest's file and host commands: the client's files), test_faulty_state, test_demo and
test_devcontainer_samples (no `cli` fixture)."""


UNIX_ONLY = ("test_bad_input",)
"""Of SERVED_MODULES, those served through the unix socket alone: what they check (a refused
manifest's file:line:field words, nothing recorded) does not depend on the transport, which
the other modules cross both ways, and their 60 tests' TLS pass cost ~70 s of CI."""


class _Daemon:
    """`controller run --listen unix:SOCK` serving a test's state directory (and, with `tls`,
    `--listen tcp:127.0.0.1:0`: DevCell's own certificate, an admin's token in a file)."""

    def __init__(self, state_dir: Path, work: Path, *, tls: bool = False,
                 env: dict[str, str] | None = None) -> None:
        self.state_dir, self.work, self.tls = state_dir, work, tls
        self.env = env or {}
        """What the daemon's process has in its environment beyond the test's (a fault the
        fake backend injects: the daemon does what a served command asks)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def options(self) -> list[str]:
        """The global options that send a command to this daemon."""
        if not self.tls:
            return ["--server", f"unix:{self.socket}"]
        return ["--server", self.url, "--certificate-authority",
                str(self.state_dir / "api-tls" / "cert.pem"),
                "--token-file", str(self.work / "admin.token")]

    @property
    def socket(self) -> Path:
        return self.work / "api.sock"

    def start(self) -> None:
        if self.proc is not None:
            return
        watched = self.work / "watched"
        watched.mkdir(exist_ok=True)
        tcp = ["--listen", "tcp:127.0.0.1:0"] if self.tls else []
        log = self.work / "daemon.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devcell", "--state-dir", str(self.state_dir), "controller",
             "run", "--manifests", str(watched), "--allow-empty", "--no-runtime-events",
             "--listen", f"unix:{self.socket}", *tcp], cwd=REPO, stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env},
            stdout=open(log, "wb"), stderr=subprocess.STDOUT,
            preexec_fn=processes.child_setup)
        deadline = time.monotonic() + 60
        while not self.socket.exists() or (self.tls and not self.url):
            assert self.proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the daemon did not listen within 60 s"
            if self.tls:
                served = re.search(r"API served on (https://127\.0\.0\.1:\d+)",
                                   log.read_text(errors="replace"))
                self.url = served.group(1) if served else ""
            time.sleep(0.05)
        if self.tls:  # made here, not by `devcell token create`: a process less per test
            from devcell.auth import tokens
            from devcell.auth.principals import Role
            from devcell.store.db import open_database

            db = open_database(self.state_dir)
            try:
                _, made = tokens.create(db, user="e2e-admin", role=Role.admin)
            finally:
                db.close()
            token = self.work / "admin.token"
            token.write_text(made + "\n")
            token.chmod(0o600)

    def stop(self) -> None:
        if self.proc is not None:
            processes.end(self.proc)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The tests of SERVED_MODULES that use `cli` run three times: direct, then through the
    daemon's unix socket (served), then through its TLS listener with a token (served-tls)."""
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    if "cli" in metafunc.fixturenames and module in SERVED_MODULES:
        metafunc.parametrize("cli_mode", ["direct", "served"] if module in UNIX_ONLY
                             else ["direct", "served", "served-tls"])


@pytest.fixture
def cli_mode() -> str:
    """How `cli` runs commands: direct (on the state directory), or through a server
    (pytest_generate_tests)."""
    return "direct"


@pytest.fixture
def cli(request: pytest.FixtureRequest, cli_mode: str, state_dir: Path, tmp_path: Path
        ) -> Iterator[Cli]:
    """The CLI as a user runs it; in SERVED_MODULES also through a server (cli_mode served)."""
    from devcell.cli.remote import SERVED

    only = request.node.get_closest_marker("state_dir_only")
    if cli_mode != "direct" and only is not None:
        pytest.skip(f"on the state directory only: {only.args[0]}")

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        full_env = dict(os.environ, DEVCELL_HOME=str(state_dir),
                        DEVCELL_CONTEXTS=str(tmp_path / "no-contexts.json"))
        full_env.pop("DEVCELL_FAKE_FAIL", None)
        full_env.update(env or {})
        words = [a for a in args if not a.startswith("-")][:2]
        served = cli_mode != "direct" and not any(
            a == "--state-dir" or a.startswith("--state-dir=") for a in args) and (
            tuple(words[:1]) + (None,) in SERVED or tuple(words[:2]) in SERVED)
        before: list[str] = []
        if served:
            before = daemon.options()
        return subprocess.run(
            [sys.executable, "-m", "devcell", *before, *args], input=input,
            capture_output=True, text=True, env=full_env, cwd=cwd or REPO, timeout=timeout)

    faults = request.node.get_closest_marker("daemon_env")
    daemon = _Daemon(state_dir, tmp_path, tls=cli_mode == "served-tls",
                     env=dict(faults.kwargs) if faults is not None else None)
    if cli_mode != "direct":
        daemon.start()  # the state directory is the daemon's before the test looks at it
    try:
        yield run
    finally:
        daemon.stop()
