"""The dashboard's tests share the API's real server (tests/server/conftest.py: one daemon on
the fake backend, a unix socket and TLS on 127.0.0.1), a family of cells made once (a cell,
three snapshots of it, two forks), tokens of each role, and for the browser tests ONE headless
Chromium (Debian's, driven by Playwright through its executable: nothing downloaded).

Screenshots are kept in $DEVCELL_ARTIFACTS/dashboard when it is set, else in pytest's base
temporary directory (`dashboard-screenshots/`, printed at the end of the run).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from tests.server.conftest import Api

CHROMIUM = ("chromium", "chromium-browser")


class Family(NamedTuple):
    cell: str
    snapshots: list[str]
    forks: list[str]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def cell_yaml(name: str) -> str:
    return ("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: " + name +
            "}\nspec:\n  backend: fake\n  image: devcell/busybox:latest\n")


@pytest.fixture(scope="session")
def family(api: Api) -> Family:
    """A cell with three snapshots, two of them forked (the lineage graph's case), made once
    with the CLI on the daemon's state directory (~2 s)."""
    name = unique("fam")
    made = api.client.post("/api/v1/apply", content=cell_yaml(name),
                           headers={"Content-Type": "application/yaml"})
    assert made.status_code == 200, made.text
    snaps = [f"{name}-s{i}" for i in (1, 2, 3)]
    forks = [f"{name}-f{i}" for i in (1, 2)]
    for snap in snaps:
        done = api.cli("snapshot", "create", "--name", snap, name)
        assert done.returncode == 0, done.stderr
    for fork, snap in zip(forks, snaps, strict=False):
        done = api.cli("cell", "fork", name, "--snapshot", snap, "--name", fork)
        assert done.returncode == 0, done.stderr
    return Family(name, snaps, forks)


@functools.cache
def _tokens(api: Api) -> dict[str, str]:
    return {role: api.token(f"ui-{role}", role) for role in ("viewer", "developer", "admin")}


@pytest.fixture
def ui_tokens(api: Api) -> dict[str, str]:
    return _tokens(api)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


@contextlib.contextmanager
def sign_in(api: Api, token: str) -> Iterator[httpx.Client]:
    """An httpx client over TLS holding a dashboard session opened with `token`."""
    with api.tls_client(None) as client:
        form = client.get("/ui/login")
        assert form.status_code == 200, form.text
        done = client.post("/ui/login", data={"csrf": csrf_of(form.text), "token": token})
        assert done.status_code == 303, done.text
        assert done.headers["location"] == "/ui/cells"
        yield client


# -- the browser ---------------------------------------------------------------------------------


def chromium_path() -> str | None:
    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    return None


def _in_ci() -> bool:
    return os.environ.get("CI", "") not in ("", "0", "false")


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("DEVCELL_ARTIFACTS")
    folder = Path(given) / "dashboard" if given else \
        tmp_path_factory.getbasetemp() / "dashboard-screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    _shown.append(folder)
    return folder


_shown: list[Path] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for folder in _shown[:1]:
        terminalreporter.write_line(f"dashboard screenshots: {folder}")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for every dashboard test of the session. Missing chromium or
    Playwright skips these tests on a developer's machine and fails them in CI (CI set)."""
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if executable is None or sync_playwright is None:
        why = ("Debian's chromium is not installed (apt-get install chromium)" if executable
               is None else "playwright is not installed (pip install -e '.[test]')")
        if _in_ci():
            pytest.fail(f"the dashboard's browser tests need it in CI: {why}")
        pytest.skip(why)
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, headless=True,
                                     args=["--no-sandbox", "--disable-gpu",
                                           "--disable-dev-shm-usage"])
        try:
            yield launched
        finally:
            launched.close()
