"""The SSH server of one ProxyCommand: one connection, over this process's stdin and stdout.

asyncssh needs a socket, OpenSSH gives the ProxyCommand pipes: a socketpair joins them, two
threads copying bytes each way. The client is not asked to authenticate (the "none" method
succeeds): reaching this process already took the right to run DevCell on the state
directory, which is the authority SSH would otherwise check. The host key pins this state
directory (keys.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from devcell import names
from devcell.api.attach import Attached
from devcell.api.ssh import keys, sessions, sftp, tunnels
from devcell.backends.interactive import (
    CellRoot,
    FileAccess,
    Forwarding,
    Subsystems,
    interactive,
)
from devcell.errors import DevCellError
from devcell.log import logger

MAX_THREADS = 256
"""Sessions, forwards and stdin writers each hold a worker while they block (an IDE opens
dozens of channels); asyncio's default of a few would starve them."""


def serve(attached: Attached, state_dir: Any, read_fd: int = 0, write_fd: int = 1) -> int:
    """Serve one SSH connection for the attached cell until the client hangs up."""
    import asyncssh

    logging.getLogger("asyncssh").setLevel(logging.CRITICAL)  # its own notes are not ours
    sftp.drop_extensions()
    backend = interactive(attached.backend, attached.backend_name)  # refused: no key made
    host_key = keys.host_key(state_dir)
    ours, theirs = socket.socketpair()
    pumps = [threading.Thread(target=_copy_in, args=(read_fd, theirs), daemon=True),
             threading.Thread(target=_copy_out, args=(theirs, write_fd), daemon=True)]
    for pump in pumps:
        pump.start()

    root: list[CellRoot] = []

    files = attached.backend if isinstance(attached.backend, FileAccess) else None

    def sftp_factory(chan: Any) -> asyncssh.SFTPServer:
        assert files is not None
        if not root:  # opened once, when first asked for, and kept for the connection
            try:
                root.append(files.open_root(attached.ref))
            except DevCellError as exc:  # said on the channel, not left to a client timeout
                chan.write_stderr(f"devcell: {names.printable(str(exc))}\n".encode())
                chan.exit(1)
                return sftp.Refusing(chan)
        return sftp.ServedSFTP(chan, root[0])

    home = _home(attached)
    handler = sessions.factory(backend, attached.ref, home)
    # A backend whose sftp is a program in the cell (vm) gets its sessions from
    # session_requested, where they can accept the subsystem (program_sessions.py).
    programs = files is None and isinstance(attached.backend, Subsystems)

    class Server(asyncssh.SSHServer):
        def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
            self.conn = conn

        def begin_auth(self, username: str) -> bool:
            return False  # no authentication: see the module's docstring

        def session_requested(self) -> Any:
            from devcell.api.ssh import program_sessions

            return program_sessions.ProgramSubsystems(handler)

        def connection_requested(self, dest_host: str, dest_port: int, orig_host: str,
                                 orig_port: int) -> Any:
            return tunnels.direct(_forwarding(attached), attached.ref, dest_host, dest_port)

        def server_requested(self, listen_host: str, listen_port: int) -> Any:
            return tunnels.remote(_forwarding(attached), self.conn, attached.ref, listen_host,
                                  listen_port)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(MAX_THREADS, "devcell-ssh"))
        ours.setblocking(False)
        conn = await asyncssh.run_server(
            ours, server_factory=Server, server_host_keys=[host_key],
            process_factory=None if programs else handler,
            sftp_factory=sftp_factory if files else None, allow_scp=False, line_editor=False, encoding=None,
            agent_forwarding=False, x11_forwarding=False, keepalive_interval=0,
            login_timeout=60)
        await conn.wait_closed()

    log = logger.bind(cell=attached.ref.name, op="ssh")
    try:
        asyncio.run(main())
    except (OSError, asyncssh.Error) as exc:
        log.debug("connection ended: {}", exc)
    finally:
        for item in root:
            os.close(item.fd)
        ours.close()
    return 0


def _home(attached: Attached) -> str:
    workspace = (attached.ref.spec.get("workspace") or {})
    return str(workspace.get("mountPath") or "/workspace")


def _forwarding(attached: Attached) -> Forwarding:
    import asyncssh

    if not isinstance(attached.backend, Forwarding):
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
                                        f"backend {attached.backend_name} does not forward "
                                        "ports yet")
    return attached.backend


def _copy_in(fd: int, sock: socket.socket) -> None:
    try:
        while data := os.read(fd, 65536):
            sock.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _copy_out(sock: socket.socket, fd: int) -> None:
    try:
        while data := sock.recv(65536):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
    except OSError:
        pass

