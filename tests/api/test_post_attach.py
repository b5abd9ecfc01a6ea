"""postAttach hooks (api/post_attach.py) against a stand-in for a backend's exec: run in
order as the session's user, their failures and timeouts said and never raised, their output
made CR LF for a raw terminal; no hooks, no exec."""

from __future__ import annotations

import io
import threading
from typing import Any, BinaryIO

from devcell.api import post_attach
from devcell.backends.base import CellRef
from devcell.backends.interactive import ExecOptions
from devcell.errors import BackendError


class _Exec:
    def __init__(self, results: list[Any]) -> None:
        self.results = results
        self.calls: list[tuple[list[str], ExecOptions | None]] = []

    def exec(self, cell: CellRef, argv: list[str], *, stdout: BinaryIO, stderr: BinaryIO,
             stdin: BinaryIO | None = None, terminal: Any = None,
             options: ExecOptions | None = None) -> int:
        self.calls.append((argv, options))
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        if result == "hang":
            assert options is not None and options.hang_up is not None
            assert options.hang_up.wait(10)  # ended by the time limit, as a backend does
            return 137
        stdout.write(b"hello\nworld\n")
        return int(result)


def _cell(hooks: dict[str, Any]) -> CellRef:
    return CellRef("cell_1", "web", {"hooks": hooks})


def test_each_runs_as_the_session_and_failures_are_said_not_raised() -> None:
    backend = _Exec([0, 3, BackendError("cell web is not running")])
    out = io.BytesIO()
    session = ExecOptions(env=(("TERM", "xterm"),), workdir="/w", user="dev")
    failed = post_attach.run(backend, _cell({"postAttach": [["a"], ["b", "x"], ["c"]]}),  # type: ignore[arg-type]
                             out=out, options=session)
    assert failed == 2 and [argv for argv, _ in backend.calls] == [["a"], ["b", "x"], ["c"]]
    options = backend.calls[0][1]
    assert options is not None and (options.env, options.workdir, options.user) == (
        session.env, "/w", "dev")
    text = out.getvalue().decode()
    assert "devcell: postAttach hook b x exited with status 3; the session goes on\n" in text
    assert "postAttach hook c could not run: cell web is not running; the session goes on" in text


def test_a_hook_past_its_time_limit_is_ended_and_a_raw_terminal_gets_cr_lf() -> None:
    backend = _Exec(["hang", 0])
    out = io.BytesIO()
    gone = threading.Event()
    failed = post_attach.run(backend, _cell({"postAttach": [["slow"], ["fast"]],  # type: ignore[arg-type]
                                             "timeoutSeconds": 1}),
                             out=out, options=ExecOptions(hang_up=gone), raw_terminal=True)
    assert failed == 1
    text = out.getvalue()
    assert b"postAttach hook slow ran past its time limit of 1s and was killed" in text
    assert b"hello\r\nworld\r\n" in text and b"\n" not in text.replace(b"\r\n", b"")


def test_no_hooks_no_exec() -> None:
    backend = _Exec([])
    assert post_attach.run(backend, _cell({}), out=io.BytesIO()) == 0  # type: ignore[arg-type]
    assert backend.calls == []
