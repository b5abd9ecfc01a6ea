"""spec.dotfiles through the cell controller (controllers/dotfiles.py, backends/dotfiles.py):
cloned on the host with the real git, sent into the cell as a tar stream and installed
through the backend's exec, once a runtime; a failing install script leaves the cell running
but not Ready with its output (secrets redacted); credentials and a backend without exec are
refused at apply. The backend is the fake with an exec that unpacks the tar on the host and
answers the install as told, so what DevCell sends and records is seen exactly."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from devcell import admission
from devcell.backends import dotfiles as backend_dotfiles
from devcell.backends.base import Capabilities, CellRef, Consistency
from devcell.backends.fake import FakeBackend
from devcell.controllers.context import Context
from devcell.errors import ManifestError
from devcell.store import events, objects
from devcell.store.db import Database
from tests.controllers.support import (
    apply,
    cell_doc,
    converge_all,
    decide,
    last_operation,
    parse,
    plan_of,
    record,
)

WITH_EXEC = Capabilities(snapshot_consistency=Consistency.METADATA, exec=True)


class ExecFake(FakeBackend):
    """The fake backend with an exec: the unpack reads the tar DevCell sends into `home`;
    the install answers `code` and `output`."""

    def __init__(self, *, state_dir: Path) -> None:
        super().__init__(state_dir=state_dir)
        self.home = state_dir.parent / "home"
        self.installs: list[list[str]] = []
        self.code = 0
        self.output = b"installed\n"
        self.hang = False

    def exec(self, cell: CellRef, argv: list[str], *, stdout: BinaryIO, stderr: BinaryIO,
             stdin: BinaryIO | None = None, terminal: Any = None, options: Any = None) -> int:
        assert argv[:2] == ["/bin/sh", "-c"]
        if argv[2] == backend_dotfiles._UNPACK:
            assert stdin is not None and argv[5] == backend_dotfiles.MARKER
            target = self.home / argv[4].removeprefix("~/")
            data = stdin.read()
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                assert {m.uid for m in tar.getmembers()} == {0}  # no host user carried in
                tar.extractall(target)  # noqa: S202 - the test's own clone
            stdout.write(f"/home/dev/{argv[4].removeprefix('~/')}\n".encode())
            return 0
        self.installs.append(argv[4:])
        stdout.write(self.output)
        if self.hang and options is not None:  # a script that never ends, until hung up
            assert options.hang_up.wait(30)
            return 137
        return self.code

    def log_sources(self, cell: CellRef) -> Any:
        raise NotImplementedError


@pytest.fixture
def backend(ctx: Context, db: Database, monkeypatch: pytest.MonkeyPatch) -> ExecFake:
    monkeypatch.setattr(FakeBackend, "capabilities", WITH_EXEC)  # admission reads the class
    fake = ExecFake(state_dir=Path(db.state_dir))
    ctx._backends["fake"] = fake
    return fake


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                                   GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
                          ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, db: Database) -> Path:
    """A dotfiles repository (install.sh, .bashrc; tag bare without install.sh), allowed."""
    work = tmp_path / "repos" / "dotfiles"
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    (work / ".bashrc").write_text("alias ll='ls -l'\n")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "bare")
    _git(work, "tag", "bare")
    (work / "install.sh").write_text("#!/bin/sh\necho hi\n")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "script")
    state = Path(db.state_dir)
    (state / "config.yaml").write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                       f"security:\n  allowedHostPaths: ['{tmp_path / 'repos'}']\n")
    os.chmod(state / "config.yaml", 0o600)
    return work


def _cell(repo: Path, ref: str | None = None, **extra: Any) -> dict[str, Any]:
    git: dict[str, Any] = {"url": str(repo)}
    if ref:
        git["ref"] = ref
    return cell_doc("api", dotfiles={"git": git, **extra},
                    env=[{"name": "TOKEN", "value": "s3cr3t-value", "secret": True}])


def _ready(db: Database) -> dict[str, Any]:
    return record(db, "Cell", "api").condition("Ready") or {}


def test_installed_after_the_first_start_and_recorded(ctx: Context, db: Database,
                                                      backend: ExecFake, repo: Path) -> None:
    apply(db, _cell(repo))
    assert plan_of(ctx, "Cell", "api").step_names == [
        "create-volume", "create", "start", "install-dotfiles"]
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    result = cell.status["dotfiles"]
    assert result["state"] == "Installed" and result["how"] == "ran install.sh"
    assert result["commit"] == _git(repo, "rev-parse", "HEAD")
    assert result["target"] == "/home/dev/dotfiles"
    assert (backend.home / "dotfiles" / ".bashrc").read_text() == "alias ll='ls -l'\n"
    assert (backend.home / "dotfiles" / ".git").is_dir()  # the developer can pull later
    assert backend.installs == [["/home/dev/dotfiles", "install.sh"]]
    assert cell.phase == "Running" and _ready(db)["status"] == "True"
    reasons = [e["reason"] for e in events.for_object(db.conn, cell.id)]
    assert "DotfilesInstalled" in reasons
    assert not list((Path(db.state_dir) / "dotfiles").iterdir())  # the host's clone is gone


def test_once_a_runtime_not_at_every_start(ctx: Context, db: Database, backend: ExecFake,
                                           repo: Path) -> None:
    apply(db, _cell(repo))
    converge_all(ctx)
    assert decide(ctx, "Cell", "api").__class__.__name__ == "Settled"
    apply(db, {**_cell(repo), "spec": {**_cell(repo)["spec"], "state": "Stopped"}})
    converge_all(ctx)
    apply(db, _cell(repo))
    assert plan_of(ctx, "Cell", "api").step_names == ["start"]
    converge_all(ctx)
    assert len(backend.installs) == 1
    changed = _cell(repo)
    changed["spec"]["env"].append({"name": "B", "value": "2"})  # the runtime is made again
    apply(db, changed)
    assert plan_of(ctx, "Cell", "api").step_names[-1] == "install-dotfiles"
    converge_all(ctx)
    assert len(backend.installs) == 2


def test_a_changed_spec_installs_again_in_the_running_cell(
        ctx: Context, db: Database, backend: ExecFake, repo: Path) -> None:
    apply(db, _cell(repo))
    converge_all(ctx)
    apply(db, _cell(repo, ref="bare"))
    plan = plan_of(ctx, "Cell", "api")
    assert (plan.action, plan.step_names) == ("dotfiles", ["install-dotfiles"])
    converge_all(ctx)
    result = record(db, "Cell", "api").status["dotfiles"]
    assert result["how"] == "linked its dotfiles into the home"  # no script at tag bare
    assert backend.installs[-1] == ["/home/dev/dotfiles", ""]
    op, steps = last_operation(db, "api")
    assert op["status"] == "Succeeded" and [s.name for s in steps] == ["install-dotfiles"]


def test_a_failing_script_leaves_the_cell_running_not_ready_with_its_output(
        ctx: Context, db: Database, backend: ExecFake, repo: Path) -> None:
    backend.code = 3
    backend.output = b"x" * 10_000 + b"\nusing s3cr3t-value\nerror: no zsh\n"
    apply(db, _cell(repo))
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    assert cell.phase == "Running"  # reachable: the developer gets in
    ready = _ready(db)
    assert ready["status"] == "False" and ready["reason"] == "DotfilesFailed"
    assert "exited with status 3" in ready["message"] and "error: no zsh" in ready["message"]
    assert "s3cr3t-value" not in ready["message"] and "<redacted>" in ready["message"]
    assert len(ready["message"]) < 2500  # bounded
    warned = [e for e in events.for_object(db.conn, cell.id) if e["reason"] == "DotfilesFailed"]
    assert warned and warned[0]["type"] == "Warning" and "no zsh" in warned[0]["message"]
    assert "s3cr3t-value" not in str(cell.status)
    # not run again at the next reconcile, and kept not Ready there
    assert decide(ctx, "Cell", "api").__class__.__name__ == "Settled"
    assert _ready(db)["reason"] == "DotfilesFailed"
    backend.code = 0
    apply(db, _cell(repo, ref="main"))  # changing spec.dotfiles runs it again
    converge_all(ctx)
    assert _ready(db)["status"] == "True" and len(backend.installs) == 2


def test_a_bad_ref_or_missing_install_command_fails_the_operation_and_leaves_nothing(
        ctx: Context, db: Database, backend: ExecFake, repo: Path) -> None:
    apply(db, _cell(repo, ref="nosuch"))
    converge_all(ctx)
    ready = _ready(db)
    assert ready["status"] == "False" and "the ref nosuch is not in the repository" in \
        ready["message"]
    assert backend.installs == []
    assert not list((Path(db.state_dir) / "dotfiles").iterdir())
    apply(db, _cell(repo, installCommand="script/none.sh"))
    converge_all(ctx)
    assert "installCommand script/none.sh is not a file of the repository" in \
        _ready(db)["message"]
    assert backend.installs == [] and not list((Path(db.state_dir) / "dotfiles").iterdir())


def test_credentials_and_a_backend_without_exec_are_refused_at_apply(
        db: Database, repo: Path) -> None:
    (manifest,) = parse(cell_doc("api", dotfiles={"git": {"url": str(repo)}}))
    problems = admission.security_problems([manifest], db.state_dir)
    assert [p.field for p in problems] == ["spec.dotfiles"]
    assert "cannot install dotfiles" in problems[0].message and problems[0].line
    doc = cell_doc("api", dotfiles={"git": {"url": "https://me:tok3n@example.com/d.git"}})
    doc["spec"].update(backend="container", image="devcell/busybox:latest")
    (manifest,) = parse(doc)
    problems = admission.security_problems([manifest], db.state_dir)
    assert [p.field for p in problems] == ["spec.dotfiles.git.url"]
    assert "holds credentials" in problems[0].message and "tok3n" not in problems[0].message
    with pytest.raises(ManifestError):
        apply(db, cell_doc("api", dotfiles={"git": {"url": str(repo)}}))
    assert objects.get(db.conn, "Cell", "api") is None  # nothing recorded


def test_a_script_that_never_ends_is_stopped_at_the_deadline_and_said(
        ctx: Context, db: Database, backend: ExecFake, repo: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_dotfiles, "INSTALL_SECONDS", 0.3)
    backend.hang = True
    apply(db, _cell(repo))
    converge_all(ctx)
    ready = _ready(db)
    assert ready["reason"] == "DotfilesFailed" and "status 137" in ready["message"]
    assert "(stopped: the install ran over 0.3 s)" in ready["message"]
    assert record(db, "Cell", "api").phase == "Running"
