"""`devcell --server URL` (cli/remote.py) without a server: the URL, the token (a file only
its owner reads, or $DEVCELL_TOKEN; never argv) and the refusals, each one line before any
connection. The commands through a real server are tests/server/test_cli_remote.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcell.cli import remote
from devcell.cli.main import main
from devcell.errors import UsageError


@pytest.mark.parametrize("url", ["http://h:1", "https://", "unix:", "h:8443", "https://h:x",
                                 "https://u:p@h:1", "https://h:1/api?x=1"])
def test_a_server_url_that_cannot_be_one_is_refused(url: str) -> None:
    with pytest.raises(UsageError, match="unix:PATH .* or https://HOST:PORT"):
        remote.check_url(url)


def test_urls() -> None:
    assert remote.check_url("https://h:8443/") == "https://h:8443"
    assert remote.check_url("unix:/run/x.sock") == "unix:/run/x.sock"


def test_the_token_file_must_be_the_owners_alone(tmp_path: Path) -> None:
    token = tmp_path / "t"
    token.write_text("dct_abc_def\nignored\n")
    token.chmod(0o640)
    with pytest.raises(UsageError, match="readable by others than its owner"):
        remote.read_token(str(token))
    token.chmod(0o600)
    assert remote.read_token(str(token)) == "dct_abc_def"
    with pytest.raises(UsageError, match="not a regular file"):
        remote.read_token(str(tmp_path))
    with pytest.raises(UsageError, match="No such file"):
        remote.read_token(str(tmp_path / "missing"))
    empty = tmp_path / "e"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(UsageError, match="empty"):
        remote.read_token(str(empty))


def test_https_needs_a_token(monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("DEVCELL_TOKEN", raising=False)
    assert main(["--server", "https://127.0.0.1:9", "get", "cells"]) == 2
    err = capsys.readouterr().err
    assert "no token for https://127.0.0.1:9" in err and "--token-file" in err
    monkeypatch.setenv("DEVCELL_TOKEN", "dct_x_y")
    assert main(["--server", "https://127.0.0.1:9", "get", "cells"]) == 1  # port 9: nothing
    assert "cannot reach the DevCell API" in capsys.readouterr().err


def test_unserved_commands_and_kinds_are_refused_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sock = f"unix:{tmp_path}/api.sock"
    for argv, said in ((["token", "list"], "`devcell token list` is not served"),
                       (["snapshot", "restore", "s"], "`devcell snapshot restore` is not served"),
                       (["cell", "restart", "web"], "`devcell cell restart` is not served"),
                       (["get", "volumes"], "`devcell get volumes` is not served"),
                       (["get", "snapshots", "--tree"], "--tree` is not served"),
                       (["apply", "-f", "x.yaml", "--approve"], "--approve is not served")):
        assert main(["--server", sock, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err
    assert main(["--server", sock, "--state-dir", str(tmp_path), "get", "cells"]) == 2
    assert "give one of them" in capsys.readouterr().err
