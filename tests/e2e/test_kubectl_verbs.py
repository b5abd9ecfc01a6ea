"""kubectl's verbs as a kubectl user types them: explain, version, completion, events --for.

Each test runs the CLI as a subprocess (completion: in a real bash on a pseudo-terminal).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, Cli

CELL = """apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {{name: {name}}}
spec: {{backend: fake}}
"""


def _apply(cli: Cli, tmp_path: Path, *names: str) -> None:
    manifests = tmp_path / "m"
    manifests.mkdir(exist_ok=True)
    for name in names:
        (manifests / f"{name}.yaml").write_text(CELL.format(name=name))
    result = cli("apply", "-f", str(manifests))
    assert result.returncode == 0, result.stderr


# -- explain --------------------------------------------------------------------------------


def test_explain_a_field_shows_type_description_default_and_enum(cli: Cli) -> None:
    result = cli("explain", "cell.spec.services.restart")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("KIND:       Cell\nVERSION:    devcell.dev/v1alpha1\n")
    assert "FIELD: spec.services.restart <string>" in out
    assert "When the supervisor restarts the service." in out
    assert "DEFAULT:    Always" in out
    assert "ENUM:\n    Always\n    OnFailure\n    Never" in out


def test_explain_an_object_lists_its_fields_required_ones_marked(cli: Cli) -> None:
    result = cli("explain", "cell.spec.services")
    assert result.returncode == 0, result.stderr
    assert "FIELD: spec.services <[]Object>" in result.stdout
    assert "  command\t<[]string> -required-\n" in result.stdout
    assert "  name\t<string> -required-\n" in result.stdout
    assert "  restart\t<string>\n" in result.stdout
    sidecars = cli("explain", "cell.spec.sidecars")  # fields shared through the schema's $defs
    assert "  env\t<[]Object>\n" in sidecars.stdout and "  build\t<Object>\n" in sidecars.stdout
    build = cli("explain", "cell.spec.sidecars.build").stdout
    assert "  dockerfile\t<string>\n" in build and "spec.build" in build
    kind = cli("explain", "cells")  # any word for the kind, as kubectl
    assert "  spec\t<Object> -required-" in kind.stdout and "DESCRIPTION:" in kind.stdout


def test_explain_recursive_shows_every_nested_field(cli: Cli) -> None:
    result = cli("explain", "cell.spec", "--recursive")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "  network\t<Object>" in lines
    assert "    ports\t<[]Object>" in lines
    assert "      containerPort\t<integer> -required-" in lines
    assert "  env\t<[]Object>" in lines and "    secret\t<boolean>" in lines
    snapshot = cli("explain", "snap", "--recursive").stdout
    assert "  spec\t<Object> -required-\n    cell\t<string> -required-" in snapshot
    config = cli("explain", "config.security").stdout
    assert "KIND:       Config" in config and "allowedHostPaths" in config


def test_explain_an_unknown_field_is_a_clear_error_naming_the_path(cli: Cli) -> None:
    result = cli("explain", "cell.spec.servics.name")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith('error: field "spec.servics.name" does not exist in Cell')
    assert "spec has no field 'servics'" in result.stderr and "services" in result.stderr
    assert "Traceback" not in result.stderr
    leaf = cli("explain", "cell.spec.backend.more")
    assert leaf.returncode == 1 and "spec.backend has no field 'more'" in leaf.stderr
    unknown = cli("explain", "widget.spec")
    assert unknown.returncode == 2 and "unknown resource type 'widget'" in unknown.stderr


def test_explain_shows_a_control_character_escaped_once(cli: Cli) -> None:
    field = cli("explain", "cell.spec.\x1b[31mX")
    assert field.returncode == 1
    assert "spec has no field '\\x1b[31mX'" in field.stderr  # `\x1b`, not `\\x1b`
    assert "\x1b" not in field.stderr
    kind = cli("explain", "ce\x1bll")
    assert kind.returncode == 2 and "unknown resource type 'ce\\x1bll'" in kind.stderr


# -- version --------------------------------------------------------------------------------


def test_version_names_client_schema_and_each_backend_with_its_reason(cli: Cli) -> None:
    from devcell import __version__

    text = cli("version")
    assert text.returncode == 0, text.stderr
    assert f"Client Version: devcell {__version__}" in text.stdout
    assert "Schema Version: devcell.dev/v1alpha1 (state database " in text.stdout
    assert "  fake: available:" in text.stdout
    as_json = json.loads(cli("version", "-o", "json").stdout)
    assert as_json["clientVersion"]["devcell"] == __version__
    backends = {b["name"]: b for b in as_json["backends"]}
    assert set(backends) >= {"fake", "container", "vm"}
    assert all(b["reason"] for b in backends.values())
    assert ("QEMU found at" in backends["vm"]["reason"]) == bool(
        shutil.which("qemu-system-x86_64") or shutil.which("qemu-system-aarch64")
        or shutil.which("qemu-kvm"))
    as_yaml = yaml.safe_load(cli("version", "-o", "yaml").stdout)
    assert as_yaml["schemaVersion"] == as_json["schemaVersion"]


def test_version_says_why_the_container_backend_cannot_be_used(cli: Cli, tmp_path: Path) -> None:
    """An engine that is not there: the reason and how to start one, not a traceback."""
    gone = f"unix://{tmp_path}/no-engine.sock"
    result = cli("version", "-o", "json", env={"DOCKER_HOST": gone})
    assert result.returncode == 0, result.stderr
    container = next(b for b in json.loads(result.stdout)["backends"] if b["name"] == "container")
    assert container["available"] is False
    assert gone in container["reason"] and "no such socket" in container["reason"]


def test_version_reports_a_running_engine_as_available(cli: Cli) -> None:
    from tests.backends.engine import require_engine

    require_engine()
    result = json.loads(cli("version", "-o", "json").stdout)
    container = next(b for b in result["backends"] if b["name"] == "container")
    assert container["available"] is True and container["version"], container


# -- completion -----------------------------------------------------------------------------


def _bin_dir(tmp_path: Path) -> Path:
    """A directory with a `devcell` command running this checkout (as the console script)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "devcell"
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} -m devcell "$@"\n')
    launcher.chmod(0o755)
    return bin_dir


class _Pty:
    """An interactive bash on a pseudo-terminal: what a user's terminal sends and shows."""

    def __init__(self, env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile", "-i"], stdin=slave, stdout=slave, stderr=slave,
            env=env, cwd=REPO, start_new_session=True)
        os.close(slave)
        self.seen = b""

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def expect(self, marker: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while marker.encode() not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{marker!r} never shown; the terminal showed {self.seen!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # the shell exited
                    break
        assert marker.encode() in self.seen, self.seen
        return self.seen.decode(errors="replace")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        os.close(self.master)


def test_bash_completes_a_cell_name_on_tab_in_a_real_terminal(
        cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    _apply(cli, tmp_path, "c0-alpha", "c1")
    env = {"PATH": f"{_bin_dir(tmp_path)}:{os.environ['PATH']}", "HOME": str(tmp_path),
           "TERM": "dumb", "PS1": "READY> ", "DEVCELL_HOME": str(state_dir),
           "PYTHONPATH": str(REPO)}
    shell = _Pty(env)
    try:
        shell.expect("READY> ")
        shell.send("source <(devcell completion bash); echo LOADED\n")
        shell.expect("LOADED")
        shell.seen = b""
        shell.send("devcell get cells c0\t")
        shell.expect("READY> devcell get cells c0-alpha ")  # completed in place, then a space
        shell.seen = b""
        shell.send("\n")
        shown = shell.expect("READY> ")
        assert "\nc0-alpha  " in shown and "not found" not in shown, shown  # it ran
        shell.seen = b""
        shell.send("devcell get ce\t")  # two candidates: their common part, then the list
        shell.expect("ce\x07ll")  # 'ce' typed, a bell (ambiguous), 'll' completed
        shell.seen = b""
        shell.send("\x15bind 'set show-all-if-ambiguous on'\n")  # list at once on TAB
        shell.expect("READY> ")
        shell.seen = b""
        shell.send("devcell get cell\t")
        listed = shell.expect("cells")
        assert "cell " in listed or "cell\r\n" in listed, listed
    finally:
        shell.close()


def test_completion_answers_verbs_kinds_flags_and_names_from_the_state_dir_given(
        cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    _apply(cli, tmp_path, "c0-alpha", "c0-beta", "c1")

    def complete(*words: str, env: dict[str, str] | None = None) -> list[str]:
        result = cli("__complete", "bash", "--", *words, env=env)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        return result.stdout.splitlines()

    assert complete("get", "cells", "c0") == [":words", "c0-alpha", "c0-beta"]
    assert complete("ge") == [":words", "get"]
    assert "explain" in complete("") and "completion" in complete("")
    assert complete("describe", "sn") == [":words", "snap", "snapshot", "snapshots"]
    assert complete("get", "cells", "--out") == [":words", "--output"]
    assert complete("get", "cells", "-o", "j") == [":words", "json", "jsonpath-file=", "jsonpath="]
    assert complete("get", "cells", "--output=j") == [
        ":words", "--output=json", "--output=jsonpath-file=", "--output=jsonpath="]
    assert complete("logs", "c1") == [":words", "c1"]
    assert complete("apply", "-f", "") == [":files"]
    assert complete("explain", "cell.spec.se") == [":words", "cell.spec.security", "cell.spec.services"]
    assert complete("explain", "cell.spec.si") == [":words", "cell.spec.sidecars"]
    assert complete("explain", "cell.spec.sidecars.") == [
        ":words", "cell.spec.sidecars.build", "cell.spec.sidecars.command",
        "cell.spec.sidecars.env", "cell.spec.sidecars.hooks", "cell.spec.sidecars.image",
        "cell.spec.sidecars.name", "cell.spec.sidecars.ports", "cell.spec.sidecars.resources",
        "cell.spec.sidecars.restart", "cell.spec.sidecars.volume"]
    assert complete("explain", "cell.spec.volumes.") == [
        ":words", "cell.spec.volumes.mountPath", "cell.spec.volumes.name"]
    assert complete("explain", "cell.spec.services.") == [
        ":words", "cell.spec.services.command", "cell.spec.services.name",
        "cell.spec.services.ready", "cell.spec.services.restart"]
    assert complete("explain", "cell.nope.x") == [":words"]
    # --state-dir on the line wins over DEVCELL_HOME; another directory has other names
    other = tmp_path / "other"
    assert complete("--state-dir", str(other), "get", "cells", "c") == [":words"]
    assert complete("get", "cells", "--state-dir", str(state_dir), "c1",
                    env={"DEVCELL_HOME": str(other)}) == [":words", "c1"]
    assert not other.exists()  # completion never creates a state directory


def test_completion_of_get_events_for_offers_kind_slash_name(
        cli: Cli, tmp_path: Path) -> None:
    _apply(cli, tmp_path, "c0-alpha", "c0-beta", "c1")

    def complete(*words: str) -> list[str]:
        result = cli("__complete", "bash", "--", *words)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        return result.stdout.splitlines()

    assert complete("get", "events", "--for", "") == [
        ":words", "cell/c0-alpha", "cell/c0-beta", "cell/c1"]
    assert complete("get", "events", "--for", "cell/c0") == [
        ":words", "cell/c0-alpha", "cell/c0-beta"]
    assert complete("get", "events", "--for", "snapshot/") == [":words"]  # none recorded
    assert complete("get", "events", "--for=cell/c1") == [":words", "--for=cell/c1"]
    assert complete("get", "events", "--for", "widget/") == [":words"]


def test_completion_reads_the_state_read_only_and_leaves_it_owner_only(
        cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    _apply(cli, tmp_path, "c0-alpha")
    before = (state_dir / "state.db").read_bytes()
    result = cli("__complete", "bash", "--", "get", "cells", "c")
    assert result.stdout.splitlines() == [":words", "c0-alpha"]
    assert (state_dir / "state.db").read_bytes() == before
    for path in state_dir.glob("state.db*"):
        assert path.stat().st_mode & 0o077 == 0, path


def test_zsh_and_fish_scripts_are_valid_for_their_shells(cli: Cli, tmp_path: Path) -> None:
    """scripts/test installs zsh and fish (Debian), so CI always checks both."""
    for shell, check in (("zsh", ["zsh", "-n"]), ("fish", ["fish", "--no-execute"]),
                         ("bash", ["bash", "-n"])):
        if shutil.which(shell) is None:
            if os.environ.get("CI"):
                pytest.fail(f"{shell} is not installed (scripts/test installs it)")
            pytest.skip(f"{shell} is not installed (scripts/test installs it)")
        script = tmp_path / f"devcell.{shell}"
        result = cli("completion", shell)
        assert result.returncode == 0, result.stderr
        script.write_text(result.stdout)
        checked = subprocess.run([*check, str(script)], capture_output=True, text=True,
                                 timeout=30, check=False)
        assert checked.returncode == 0, (shell, checked.stderr)


# -- get events --for -----------------------------------------------------------------------


def test_get_events_for_one_object_as_kubectl(cli: Cli, tmp_path: Path) -> None:
    _apply(cli, tmp_path, "api", "db")
    snap = cli("snapshot", "create", "api", "--name", "api")  # same name, other kind
    assert snap.returncode == 0, snap.stderr
    result = cli("get", "events", "--for", "cell/api", "-o", "json")
    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)["items"]
    assert items and {(e["object_kind"], e["object_name"]) for e in items} == {("Cell", "api")}
    everything = json.loads(cli("get", "events", "-o", "json").stdout)["items"]
    assert len(items) == len([e for e in everything if e["object_kind"] == "Cell"
                              and e["object_name"] == "api"])
    table = cli("get", "ev", "--for", "snap/api")
    assert table.returncode == 0 and "snapshot/api" in table.stdout
    assert "cell/api" not in table.stdout and "cell/db" not in table.stdout
    by_id = items[0]["object_id"]
    assert cli("get", "events", "--for", f"cell/{by_id}", "-o", "json").stdout == result.stdout
    bad = cli("get", "events", "--for", "api")
    assert bad.returncode == 2 and "--for takes KIND/NAME" in bad.stderr
    wrong = cli("get", "cells", "--for", "cell/api")
    assert wrong.returncode == 2 and "get events --for" in wrong.stderr


# -- global flags (issue 13, item 4) --------------------------------------------------------


def test_global_flags_work_before_or_after_the_verb(cli: Cli, tmp_path: Path) -> None:
    """`--state-dir`, `-v` and `-o` where the verb has it, as kubectl's `-n`: the same answer
    wherever they are typed. DEVCELL_HOME points elsewhere, so only the flag can find the cell."""
    state = tmp_path / "flagged"
    env = {"DEVCELL_HOME": str(tmp_path / "unused")}
    manifests = tmp_path / "m"
    manifests.mkdir()
    (manifests / "api.yaml").write_text(CELL.format(name="api"))
    applied = cli("apply", "-f", str(manifests), "--state-dir", str(state), "-v", env=env)
    assert applied.returncode == 0, applied.stderr
    lines = [["--state-dir", str(state), "get", "cells", "-o", "name"],
             ["get", "--state-dir", str(state), "cells", "-o", "name"],
             ["get", "cells", "-o", "name", "--state-dir", str(state)],
             ["-v", "get", "-o", "name", "cells", f"--state-dir={state}"]]
    for words in lines:
        result = cli(*words, env=env)
        assert (result.returncode, result.stdout) == (0, "cell/api\n"), (words, result.stderr)
    assert not (tmp_path / "unused").exists()
