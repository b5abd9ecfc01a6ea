"""Shared fixtures: a private state directory, the CLI as a subprocess, database fingerprints."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The test swarm's session fixtures (`swarm`, `clean_swarm`): registered once here, so every
# module that uses them shares one swarm per session.
pytest_plugins = ["tests.swarm"]

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def pytest_configure(config: pytest.Config) -> None:
    """SIGINT back to Python's own handler when the run inherited it ignored (a suite started
    in the background by a shell without job control): an ignored SIGINT is passed on to every
    CLI the tests start, and the interrupt tests would then see commands that cannot be
    interrupted. A handler, unlike SIG_IGN, is not inherited across exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # No contexts file (cli/contexts.py): a current context on the machine running the
    # tests would send every CLI they start to its server instead of their state directory.
    import tempfile

    no_contexts = tempfile.mkdtemp(prefix="devcell-no-contexts-")
    config.add_cleanup(lambda: shutil.rmtree(no_contexts, ignore_errors=True))
    os.environ["DEVCELL_CONTEXTS"] = os.path.join(no_contexts, "contexts.json")
    # Tests that race processes use multiprocessing's forkserver, never a bare fork: the
    # session holds dozens of threads by then, and a child forked while one of them held a
    # lock hung on it (a hash-key race test, 386 s until killed). Its server and resource
    # tracker are started here, before any thread, and live for the session.
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    forkserver.ensure_running()


def allow_host_paths(state: Path, root: Path) -> None:
    """DevCell's configuration in `state` allowing host paths under `root` (owner-only, as
    DevCell requires of its configuration)."""
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    (state / "config.yaml").write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                       f"security:\n  allowedHostPaths: ['{root}']\n")
    os.chmod(state / "config.yaml", 0o600)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Containers a test's cells left (a test whose fixtures do not delete its cells) are
    removed when the session ends, found by the state-path label under this session's base
    temporary directory: nothing else is touched."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or not factory._basetemp:
        return
    from devcell.backends.host import treecopy
    from tests.backends.engine import remove_containers_under

    remove_containers_under(Path(factory.getbasetemp()))
    # a module-scoped fixture's fork (tmp_path_factory) is past the per-test detach below
    treecopy.detach_mounts_under(Path(factory.getbasetemp()))


@pytest.fixture(autouse=True)
def _no_mount_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A fork's workspace is an overlay mount: whatever a test leaves mounted under its
    temporary directory is detached when it ends (after its containers are gone), so no
    mount outlives the test and pytest can remove the directory later."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp: Path = request.getfixturevalue("tmp_path")
    yield
    from devcell.backends.host import treecopy

    treecopy.detach_mounts_under(tmp)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(state_dir: Path) -> Cli:
    """Run `python -m devcell ARGS...` as a user would; returns the completed process."""

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        full_env = dict(os.environ, DEVCELL_HOME=str(state_dir))
        full_env.pop("DEVCELL_FAKE_FAIL", None)
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "devcell", *args], input=input, capture_output=True,
            text=True, env=full_env, cwd=cwd or REPO, timeout=timeout,
        )

    return run


def db_fingerprint(state_dir: Path) -> str | None:
    """A digest of every row of state.db (None when there is no database yet)."""
    path = state_dir / "state.db"
    if not path.exists():
        return None
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()
    finally:
        conn.close()


@pytest.fixture
def fingerprint() -> Callable[[Path], str | None]:
    return db_fingerprint


@pytest.fixture(autouse=True)
def _no_process_left_behind() -> Iterator[None]:
    """Every process a test starts is ended by the test, whatever happens (tests/processes.py):
    one still running a few seconds after the test is killed, and the test fails."""
    from tests import processes, swarm

    before = set(processes.live_children())
    yield
    left = processes.leftovers(before | swarm.engine_pids())
    if left:
        pytest.fail("the test left processes running (killed now): "
                    + "; ".join(f"{pid}: {cmd[:120]}" for pid, cmd in sorted(left.items())))


@pytest.fixture(autouse=True)
def _no_context_made_current() -> Iterator[None]:
    """The session's contexts file (pytest_configure) stays absent: a test that makes one
    would send every later CLI (and its imports) to a server; it is removed and the test fails."""
    yield
    where = os.environ.get("DEVCELL_CONTEXTS", "")
    if where and os.path.lexists(where):
        os.unlink(where)
        pytest.fail(f"the test left a contexts file at {where} (removed now): give the "
                    "commands it runs their own $DEVCELL_CONTEXTS")


@pytest.fixture(autouse=True)
def _library_logs_silent() -> Iterator[None]:
    """DevCell is silent as a library (devcell.log): a test that enables its logs, as the CLI
    run in-process does, leaves them silent again for the next test."""
    from devcell import log

    log.disable()
    yield
    log.disable()


@pytest.fixture(autouse=True)
def _fresh_fake_fault_budget() -> None:
    """DEVCELL_FAKE_FAIL counts are per process; each test starts with a full budget."""
    from devcell.backends import fake

    fake._ENV_FAILURES.clear()
