"""`devcell logs` reads a directory the cell can write: whatever a hostile cell plants there
(a link to a host file, a FIFO, a directory, a huge sparse file) is refused or read in bounded
amounts; nothing is followed, nothing hangs, nothing fills memory."""

from __future__ import annotations

import io
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from devcell import safeio
from devcell.cli.cmd_logs import _Tail

SECRET = b"root:host-secret-hash:19000:0:99999:7:::\n"


class Captured:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.out, self.err = io.BytesIO(), io.StringIO()
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(self.out))
        monkeypatch.setattr(sys, "stderr", self.err)

    def printed(self) -> bytes:
        sys.stdout.flush()
        return self.out.getvalue()


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "shadow").write_bytes(SECRET)
    directory = tmp_path / "logs"
    directory.mkdir()
    return directory


def pump(path: Path, *, final: bool = True) -> _Tail:
    tail = _Tail(path, b"")
    with ExitStack() as stack:
        tail.pump(stack, final=final)
    return tail


@pytest.mark.parametrize("plant", ["symlink", "fifo", "directory", "socket"])
def test_anything_but_a_regular_file_is_refused_and_named(
        logs: Path, plant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    target = logs / "web.log"
    if plant == "symlink":
        target.symlink_to(logs.parent / "host" / "shadow")
    elif plant == "fifo":
        os.mkfifo(target)  # opening it for reading would block forever
    elif plant == "directory":
        target.mkdir()
    else:
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
        sock.close()
    seen = Captured(monkeypatch)
    tail = pump(target)
    assert tail.refused and seen.printed() == b""
    assert "web.log is a" in seen.err.getvalue() and "not read" in seen.err.getvalue()


def test_a_link_planted_as_the_log_directory_is_not_followed(
        logs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = logs / "inner"
    planted.symlink_to(logs.parent / "host")
    seen = Captured(monkeypatch)
    tail = pump(planted / "shadow")
    assert tail.refused and seen.printed() == b""


def test_a_huge_sparse_file_is_read_from_its_end_in_bounded_pieces(
        logs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = logs / "web.log"
    with target.open("wb") as f:
        f.truncate(1 << 30)  # 1 GiB of holes
        f.seek(0, os.SEEK_END)
        f.write(b"the last line\n")
    seen = Captured(monkeypatch)
    written: list[int] = []
    real_write = sys.stdout.buffer.write
    monkeypatch.setattr(sys.stdout.buffer, "write",
                        lambda data: written.append(len(data)) or real_write(data))
    pump(target)
    assert sum(written) <= _Tail.INITIAL_MAX + len(b"the last line\n")
    assert max(written) <= _Tail.PUMP_MAX + _Tail.LINE_MAX  # printed piece by piece
    assert seen.printed().endswith(b"the last line\n")
    assert "showing its last 8 MiB" in seen.err.getvalue()


def test_a_plain_log_is_printed_line_by_line(logs: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    target = logs / "web.log"
    target.write_bytes(b"one\ntwo\npart")
    seen = Captured(monkeypatch)
    tail = _Tail(target, b"[web] ")
    with ExitStack() as stack:
        tail.pump(stack)
        assert seen.printed() == b"[web] one\n[web] two\n"
        with target.open("ab") as f:
            f.write(b"ial\n")
        tail.pump(stack)
    assert seen.printed() == b"[web] one\n[web] two\n[web] partial\n"


def test_open_regular_refuses_names_that_leave_the_directory(logs: Path) -> None:
    for name in ("", ".", "..", "../host/shadow", "a/b"):
        with pytest.raises(safeio.UnsafeFile):
            safeio.open_regular(logs, name)
    with pytest.raises(FileNotFoundError):
        safeio.open_regular(logs, "missing.log")


def test_control_characters_a_cell_logs_are_escaped(logs: Path, monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:
    """An ESC sequence, an OSC title, a bare carriage return forging a line, a C1 CSI and
    bytes that are not UTF-8 never reach the terminal raw; tabs, \\n and \\r\\n are kept."""
    target = logs / "esc.log"
    target.write_bytes(b"a\x1b[31mRED\x1b]0;title\x07\rforged\n\tok\r\n\xc2\x9b2J \xff\x00\n"
                       b"caf\xc3\xa9\n")
    seen = Captured(monkeypatch)
    pump(target)
    printed = seen.printed()
    assert printed == (b"a\\x1b[31mRED\\x1b]0;title\\x07\\rforged\n\tok\r\n"
                       b"\\x9b2J \\xff\\x00\ncaf\xc3\xa9\n")
    shown = printed.replace(b"\r\n", b"\n").replace(b"\t", b"").replace(b"\n", b"")
    assert all(32 <= b < 127 or b >= 0xa0 for b in shown.replace(b"\xc3\xa9", b""))


def test_a_thousand_logs_are_read_one_open_at_a_time(logs: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """1,100 extra `*.log` files: every log stayed open, the descriptors ran out, and the
    service's real log was called "not a regular file; not read" (exit 0)."""
    import argparse
    import resource

    from devcell.backends import log_source
    from devcell.backends.base import CellRef
    from devcell.cli.cmd_logs import _print_logs

    paths = {"web": logs / "web.log"}
    paths["web"].write_bytes(b"the service's own line\n")
    for i in range(1100):
        paths[f"extra{i:04d}"] = logs / f"extra{i:04d}.log"
        paths[f"extra{i:04d}"].write_bytes(b"x\n")
    captured = Captured(monkeypatch)
    args = argparse.Namespace(service=None, timestamps=False, tail=-1, follow=False)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 64, hard))  # far fewer than 1,101
    try:
        _print_logs(args, CellRef("cell_x", "x", {}, "vol_x"), log_source.HostLogs(paths), None)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert b"[web] the service's own line\n" in captured.printed()
    assert captured.printed().count(b"] x\n") == 1100
    assert "not read" not in captured.err.getvalue() and "skipping" not in captured.err.getvalue()


def test_running_out_of_descriptors_is_not_called_the_files_fault(logs: Path) -> None:
    import errno
    import resource

    (logs / "web.log").write_bytes(b"line\n")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
    try:
        with pytest.raises(OSError) as raised:
            while True:
                held.append(os.open(logs, os.O_RDONLY))
                os.close(safeio.open_regular(logs, "web.log"))
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not isinstance(raised.value, safeio.UnsafeFile)
    assert raised.value.errno == errno.EMFILE


def test_a_regular_file_that_cannot_be_opened_is_not_called_something_else(
        logs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    (logs / "web.log").write_bytes(b"line\n")
    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "web.log":
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)
    with pytest.raises(safeio.UnsafeFile, match="a regular file that cannot be opened"):
        safeio.open_regular(logs, "web.log")
