"""`devcell --server URL snapshot export|import` (cli/remote_transfer.py) against servers
that are not DevCell's or fail midway: one error line, never a traceback, and no archive
file left that is not whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcell.cli.main import main
from tests.cli.test_remote import _serve_raw

ARCHIVE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\n"
                b"DevCell-Operation: op_0123456789abcdefgh\r\n")


@pytest.mark.parametrize("answer, said", [
    (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 30\r\n"
     b"Connection: close\r\n\r\n<html>a proxy's sign-in</html>", "is it DevCell's API"),
    # the archive's head, then less than its length: cut short (the server went away)
    (ARCHIVE_HEAD + b"Content-Length: 100000\r\nConnection: close\r\n\r\n" + b"\0" * 512,
     "the archive was cut short after 512 bytes"),
    (b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\nContent-Length: 3\r\n"
     b"Connection: close\r\n\r\nabc", "an archive without its type"),
], ids=["html", "cut-short", "no-operation"])
def test_an_export_from_a_server_that_fails_leaves_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        answer: bytes, said: str) -> None:
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    listener = _serve_raw(tmp_path / "s.sock", answer)
    out_file = tmp_path / "out.tar"
    try:
        code = main(["--server", f"unix:{tmp_path}/s.sock", "snapshot", "export", "s", "-o",
                     str(out_file)])
    finally:
        listener.close()
    out, err = capsys.readouterr()
    assert (code, out) == (1, ""), err
    assert said in err and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert not out_file.exists() and not list(tmp_path.glob(".out.tar.*"))


def _answer(status: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/problem+json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


@pytest.mark.parametrize("answer, said", [
    (b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
     b"Connection: close\r\n\r\n{}", "an import without what it imported"),
    (_answer("422 Unprocessable", b'{"type": "https://devcell.dev/problems/archive-refused", '
             b'"detail": "archive refused, nothing imported: \\u001b"}'),
     "error: archive refused, nothing imported: \\x1b"),
], ids=["empty", "refused"])
def test_an_import_a_server_answers_oddly_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        answer: bytes, said: str) -> None:
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    archive = tmp_path / "a.tar"
    archive.write_bytes(b"\0" * 1024)
    listener = _serve_raw(tmp_path / "s.sock", answer)
    try:
        code = main(["--server", f"unix:{tmp_path}/s.sock", "snapshot", "import",
                     str(archive)])
    finally:
        listener.close()
    out, err = capsys.readouterr()
    assert (code, out) == (1, ""), err
    assert said in err and "\x1b" not in err and "Traceback" not in err
    assert len(err.splitlines()) == 1, err
