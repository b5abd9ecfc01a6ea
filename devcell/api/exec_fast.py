"""The fast path of `devcell exec`: a command in a cell recorded Running on the container
backend, whose container runs, at the cost of a read of one row and four engine requests.

The full path (api/attach.py, then the backend through the docker SDK) opens the database for
writing, observes every backend's runtimes, records, loads the SDK and asks the engine again:
~5x `docker exec`. Here the state database is read read-only (store/cell_glance.py) and the
container is looked at once over the engine's socket (backends/container/exec_socket.py); that
look is the drift check the full path makes. When it agrees, nothing is written: not the
database, and not the confirmation time `get` shows as OBSERVED (store/observations.py, which
the full path rewrites on every exec), which stays that of the last command that wrote it.

Whatever else (another backend or phase, a runtime that drifted, several containers, an
engine this path cannot reach, an unexpected answer) returns None before anything ran in the
cell: the caller takes the full path, which observes, records a drift and warns about it, or
says what is wrong, exactly as before (an engine that takes a connection and never answers
is said here as the full path says it: it would wait twice as long first). Once the start
was sent, the command may run: a start left unanswered, or a broken engine connection after
it, is a BackendError, never a second run on the full path.
"""

from __future__ import annotations

import _socket
import sys

from devcell.backends.container import engine_http, exec_socket
from devcell.backends.container.engine import HOW_TO_START, engine_address
from devcell.store import activity_sessions, cell_glance
from devcell.store import state_dir as state_dirs

TYPE_CHECKING = False  # typing costs ~2 ms to import; mypy reads this as True
if TYPE_CHECKING:
    from typing import BinaryIO


def run(state_dir: str, ref: str, argv: list[str], *, stdin: BinaryIO | None,
        env: list[str] | None, workdir: str | None) -> int | None:
    """Run `argv` in the cell named (or with id) `ref` and relay its output to this process's
    stdout and stderr; its exit status, or None: not a case for this path, nothing ran.
    `state_dir` is a string (state_dir.location): pathlib's import costs ~7 ms."""
    try:
        state_dirs.check(state_dir)
    except Exception:  # the full path checks it again, and says why
        return None
    cell = cell_glance.cell(state_dir, ref)
    if (cell is None or cell.backend != "container" or cell.phase != "Running"
            or not cell.converged or cell.deleting):
        return None
    try:
        path = exec_socket.socket_path()
        container = exec_socket.running_container(path, state_dir, cell.id)
        exec_id = exec_socket.create(path, container, argv, stdin=stdin is not None, env=env,
                                     workdir=workdir)
    except exec_socket.Silent:  # what the full path says, 60 s later
        from devcell.errors import BackendUnavailable

        raise BackendUnavailable(f"the container backend cannot reach the Docker engine at "
                                 f"{engine_address()} (timed out); {HOW_TO_START}") from None
    except exec_socket.Fallback:
        return None
    # The session counts as the cell's activity (idle sleep), as on the full path (cmd_exec).
    session = activity_sessions.open_session(state_dir, cell.id, "exec")
    try:
        try:
            sock, first = exec_socket.start(path, exec_id)
        except exec_socket.Fallback:
            return None
        except engine_http.Unanswered as exc:  # never run twice: say it instead
            from devcell.errors import BackendUnavailable

            raise BackendUnavailable(
                f"exec in cell {cell.name}: the Docker engine did not answer the start of the "
                f"command ({exc}); it may have run, so it was not run again") from None
        return _attached(path, sock, first, exec_id, cell.name, stdin)
    finally:
        if session is not None:
            session.close()


def _attached(path: str, sock: _socket.socket, first: bytes, exec_id: str,
              cell_name: str, stdin: BinaryIO | None) -> int:
    """Relay the started command's streams, then its exit status."""
    action = f"exec in cell {cell_name}"
    try:
        if stdin is not None:
            import threading

            threading.Thread(target=exec_socket.feed, args=(stdin, sock), daemon=True,
                             name="devcell-exec-stdin").start()
        exec_socket.relay(sock, first, sys.stdout.buffer, sys.stderr.buffer)
    except exec_socket.OutputFailed as exc:
        from devcell.errors import DevCellError

        raise DevCellError(f"{action}: its output could not be written here ({exc})") from None
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise  # our own stdout closed: the CLI's edge handles it as for any command
        from devcell.errors import BackendError

        raise BackendError(f"{action}: the connection to the Docker engine broke ({exc})"
                           ) from None
    finally:
        exec_socket.hang_up(sock)
    try:
        return exec_socket.exit_code(path, exec_id)
    except (OSError, engine_http.BadResponse, exec_socket.Fallback) as exc:
        from devcell.errors import BackendUnavailable

        raise BackendUnavailable(f"{action}: the Docker engine did not say how the command "
                                 f"ended ({exc})") from None
