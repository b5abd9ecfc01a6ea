"""SSH sessions whose sftp subsystem is a program inside the cell (a vm cell's sftp-server).

asyncssh accepts the `sftp` subsystem only when it serves SFTP itself (an `sftp_factory`,
what a container cell gets: host/rooted.py resolves its paths). A vm cell's files are not the
host's to open, so its sftp is OpenSSH's own sftp-server run in the guest over exec: the
session must accept the request and hand the channel to the same process handler as a shell
(sessions.py sees `process.subsystem` and asks the backend which program serves it). This
session class does only that; everything else is asyncssh's own process session.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import asyncssh
from asyncssh.constants import EXTENDED_DATA_STDERR
from asyncssh.stream import SSHReader, SSHWriter

SUBSYSTEMS = ("sftp",)


class ProgramSubsystems(asyncssh.SSHServerProcess[bytes]):
    """An SSH server process whose `sftp` subsystem reaches the process handler."""

    def __init__(self, handler: Callable[[asyncssh.SSHServerProcess[bytes]], Any]) -> None:
        super().__init__(handler, None, 0, False)

    def subsystem_requested(self, subsystem: str) -> bool:
        return subsystem in SUBSYSTEMS or bool(super().subsystem_requested(subsystem))

    def session_started(self) -> None:
        chan: Any = self._chan
        if chan.get_subsystem() not in SUBSYSTEMS:
            super().session_started()
            return
        # asyncssh's own session_started would serve SFTP itself here: the process handler
        # gets the channel instead, exactly as for a shell.
        stdin: Any = SSHReader(self, chan)
        stdout: Any = SSHWriter(self, chan)
        stderr: Any = SSHWriter(self, chan, EXTENDED_DATA_STDERR)
        factory: Any = self._session_factory
        handler = factory(stdin, stdout, stderr)
        if inspect.isawaitable(handler):
            conn: Any = self._conn
            conn.create_task(handler, stdin.logger)
