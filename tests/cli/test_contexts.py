"""The contexts file (devcell/cli/contexts.py) and `devcell context list|use|set|delete`
(cli/cmd_context.py): owner-only, atomic, refused when another may write it; a current
context sends the commands that use state to its server, --state-dir keeps them local.
In-process, no server: fast."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from devcell.cli import contexts
from devcell.cli.main import main


@pytest.fixture
def file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "config" / "contexts.json"
    monkeypatch.setenv(contexts.ENV, str(where))
    monkeypatch.delenv("DEVCELL_TOKEN", raising=False)
    return where


def _token(tmp_path: Path, mode: int = 0o600) -> Path:
    token = tmp_path / "token"
    token.write_text("dct_0123456789ab_secret\n")
    token.chmod(mode)
    return token


def test_set_use_list_delete(file: Path, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["context", "list"]) == 0
    assert "No contexts" in capsys.readouterr().err
    token = _token(tmp_path)
    assert main(["context", "set", "team", "--server", "https://devbox:8443/",
                 "--token-file", str(token), "--use"]) == 0
    assert main(["context", "set", "local", "--server", "unix:api.sock"]) == 0
    assert (file.stat().st_mode & 0o777, file.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    doc = json.loads(file.read_text())
    assert doc["current"] == "team"
    assert doc["contexts"]["team"] == {"server": "https://devbox:8443",
                                       "tokenFile": str(token)}
    assert doc["contexts"]["local"]["server"] == f"unix:{os.getcwd()}/api.sock"
    capsys.readouterr()
    assert main(["context", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["CURRENT", "NAME", "SERVER", "TOKEN-FILE",
                                "CERTIFICATE-AUTHORITY"]
    assert lines[2].split()[:2] == ["*", "team"] and lines[1].split()[0] == "local"
    assert main(["context", "set", "team", "--token-file", ""]) == 0
    assert "tokenFile" not in json.loads(file.read_text())["contexts"]["team"]
    assert main(["context", "use", "--none"]) == 0
    assert json.loads(file.read_text())["current"] is None
    assert main(["context", "delete", "local"]) == 0
    assert list(json.loads(file.read_text())["contexts"]) == ["team"]
    assert main(["context", "delete", "local"]) == 1
    assert main(["context", "use", "nope"]) == 1
    assert not list(file.parent.glob(".*.tmp"))


def test_bad_input_is_refused_and_nothing_written(file: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["context", "set", "new"]) == 2  # a new context needs its server
    assert main(["context", "set", "x", "--server", "http://devbox"]) == 2
    assert main(["context", "set", "x", "--server", "unix:/s",
                 "--token-file", str(_token(tmp_path, 0o644))]) == 2
    err = capsys.readouterr().err
    assert "give its --server URL" in err and "plain http is never served" in err
    assert "chmod 600" in err
    assert not file.exists()


def test_a_file_others_may_write_is_refused(file: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["context", "set", "a", "--server", "unix:/s", "--use"]) == 0
    file.chmod(0o666)
    assert main(["get", "cells"]) == 1
    assert "writable by you alone" in capsys.readouterr().err
    file.chmod(0o600)
    file.write_text("{not json")
    assert main(["context", "list"]) == 1
    assert "not JSON" in capsys.readouterr().err


@pytest.mark.parametrize("text", [
    '{"current": ["a"], "contexts": {}}',
    '{"current": {"a": 1}, "contexts": {"a": {"server": "unix:/s"}}}',
    '{"current": 5, "contexts": {}}',
    "[" * 100_000,
])
def test_a_malformed_file_is_one_line_naming_it(file: Path, text: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A `current` that is not a name, JSON nested thousands deep: the file named in one
    line, not a TypeError or RecursionError traceback (found by attack27c)."""
    file.parent.mkdir(mode=0o700)
    file.write_text(text)
    file.chmod(0o600)
    for argv in (["context", "list"], ["get", "cells"]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: {file}: ") and err.count("\n") == 1, err


def test_a_current_context_sends_commands_to_its_server(
        file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sock = tmp_path / "none.sock"
    assert main(["context", "set", "a", "--server", f"unix:{sock}", "--use"]) == 0
    capsys.readouterr()
    assert main(["get", "cells"]) == 1  # nothing listens there: said, not a traceback
    err = capsys.readouterr().err
    assert err.startswith(f"error: DevCell API at unix:{sock}: ") and "context a" in err
    assert "--listen" in err and err.count("\n") == 1
    # a command the API does not serve is refused, naming it, and nothing is made locally
    state = tmp_path / "state"
    assert main(["get", "volumes", "-w"]) == 2
    assert "`devcell get volumes -w` is not served" in capsys.readouterr().err
    # --state-dir: the state directory, whatever context is current
    assert main(["--state-dir", str(state), "get", "cells"]) == 0
    assert main(["--state-dir", str(state), "--context", "a", "get", "cells"]) == 2
    # commands that use no state run here
    assert main(["schema", "cell"]) == 0
    assert main(["--context", "b", "get", "cells"]) == 2
    assert "no such context" in capsys.readouterr().err
