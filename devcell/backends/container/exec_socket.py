"""A command in a running container cell over the engine's unix socket, standard library only:
the fast path of `devcell exec`.

`docker exec CONTAINER true` takes ~65 ms here, most of it the engine's own work; the docker
SDK's import alone (requests, urllib3, http.client, email...) costs ~100 ms, so a `devcell
exec` through it cannot come near. The common case needs four small requests, made here with
`engine_http`: the cell's container listed by its labels (the one look at the runtime, which
also says whether it drifted from the recorded phase), an exec created, started on a
connection the engine hijacks, and inspected for its exit status.

What this does not cover raises `Fallback` before any command ran (another engine address
than a unix socket, a client configuration that changes the SDK's requests, a container that
is not plainly running, an engine answer it does not expect), and the caller takes the full
path (api/attach.py and ContainerBackend.exec through the SDK), which says what is wrong.

A hostile cell controls its output: it is relayed as it comes in pieces of at most CHUNK
bytes, whatever size a frame claims, never gathered; every other answer is read up to a bound.
No dataclass, typing, json (engine_json.py) or error classes at import: they would cost more
than the requests.
"""

from __future__ import annotations

import _socket
import os
import time

try:  # the built-in SHA-256: hashlib's import loads OpenSSL first (~2.5 ms)
    from _sha256 import sha256
except ImportError:  # Python 3.12 and later
    from hashlib import sha256

from devcell.backends.container import engine_http, engine_json
from devcell.backends.container.engine import engine_address
from devcell.backends.container.labels import CELL_ID, MANAGED, STATE

TYPE_CHECKING = False  # typing itself costs ~2 ms to import; mypy reads this as True
if TYPE_CHECKING:
    from typing import BinaryIO

CHUNK = 1 << 16
"""The most output read (and so held) at once, whatever a frame's header claims."""
ANSWER_LIMIT = 1 << 20
"""The engine's answers besides the stream (a container list of one, an exec's id or state)."""
TIMEOUT_S = 30.0
EXIT_WAIT_S = 5.0
"""How long the engine may take to record the exit status after the output ended."""
STDERR = 2
"""A frame's stream number for the command's stderr (1: stdout)."""
EXEC_PREFIX = ("/bin/sh", "/devcell/supervisor.sh", "--exec")
"""supervisor.exec_argv's wrapper (the cell's environment, secrets included), spelled out:
that module's imports (the security rules) cost more than this whole path. A test pins the
two equal."""
QUIESCED = "quiesced"
"""observe.QUIESCED: the marker of hooks run for a checkpoint and not yet resumed."""
_SAFE_ID = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_URL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")


class Fallback(Exception):
    """Not a case this path covers; nothing ran in the cell. Take the full path."""


class OutputFailed(Exception):
    """The command's output could not be written here (stdout on a full disk, a terminal
    gone): this process's fault, not the engine's. Its text is the OSError's."""


class Silent(Fallback):
    """The engine took a connection and said nothing for TIMEOUT_S; nothing ran. The full
    path would wait as long again, twice (its observation, then its look at the container),
    to say the engine cannot be reached: the caller says it now."""


def socket_path() -> str:
    """The engine's unix socket (DOCKER_HOST or the default), as the SDK would reach it."""
    address = engine_address()
    if not address.startswith("unix://") or not address[len("unix://"):].startswith("/"):
        raise Fallback("an engine address other than a unix socket: the SDK speaks it")
    if _client_config_changes_requests():
        raise Fallback("the docker client configuration adds to the SDK's requests")
    return address[len("unix://"):]


def _client_config_changes_requests() -> bool:
    """Whether the docker client configuration the SDK reads (the first of DOCKER_CONFIG's
    config.json, ~/.docker/config.json, ~/.dockercfg) sets what it adds to an exec: its
    detach keys, or HTTP headers on every request."""
    home = os.path.expanduser("~")
    configured = os.environ.get("DOCKER_CONFIG")
    for path in ((os.path.join(configured, "config.json") if configured else None),
                 os.path.join(home, ".docker", "config.json"), os.path.join(home, ".dockercfg")):
        if path is None or not os.path.exists(path):
            continue
        try:
            with open(path, "rb") as f:
                found = engine_json.loads(f.read(ANSWER_LIMIT))
        except (OSError, ValueError):
            return False  # the SDK reads it as no configuration too
        return isinstance(found, dict) and ("detachKeys" in found or "HttpHeaders" in found)
    return False


def state_hash(state_dir: str) -> str:
    """host.ids.state_hash without its imports (a test pins the two equal)."""
    return sha256(os.path.realpath(state_dir).encode()).hexdigest()[:16]


def running_container(path: str, state_dir: str, cell_id: str) -> str:
    """The id of the cell's one container (found by DevCell's labels, as the full path finds
    it) when it runs and is not frozen or quiesced: what observing it would confirm. Anything
    else (none, several, stopped, paused, restarting, mid-checkpoint) is the full path's to
    observe, record and say."""
    if not cell_id or not set(cell_id) <= _SAFE_ID:
        raise Fallback("not a safe cell id")
    owner = state_hash(state_dir)
    filters = engine_json.dumps({"label": [f"{MANAGED}=true", f"{STATE}={owner}",
                                    f"{CELL_ID}={cell_id}"]})
    listed = _json(path, "GET", "/containers/json?all=1&filters=" + _quote(filters), 200)
    if not isinstance(listed, list):
        raise Fallback("not a list of containers")
    owned = [c for c in listed if isinstance(c, dict) and _owned(c, owner, cell_id)]
    if len(owned) != 1 or owned[0].get("State") != "running":
        raise Fallback("not one running container")
    if os.path.exists(os.path.join(state_dir, "containers", cell_id, QUIESCED)):
        raise Fallback("quiesced for a checkpoint")
    container_id = owned[0].get("Id")
    if not isinstance(container_id, str) or not _hex(container_id):
        raise Fallback("not a container id")
    return container_id


def _owned(info: dict[str, object], owner: str, cell_id: str) -> bool:
    labels = info.get("Labels")
    return (isinstance(labels, dict) and labels.get(MANAGED) == "true"
            and labels.get(STATE) == owner and labels.get(CELL_ID) == cell_id)


def create(path: str, container_id: str, argv: list[str], *, stdin: bool,
           env: list[str] | None, workdir: str | None) -> str:
    """An exec of `argv` (through the cell's supervisor, as the full path runs it) in the
    container: the request the SDK's exec_create sends, without a terminal."""
    fields: dict[str, object] = {
        "Container": container_id, "User": "", "Privileged": False, "Tty": False,
        "AttachStdin": stdin, "AttachStdout": True, "AttachStderr": True,
        "Cmd": [*EXEC_PREFIX, *argv]}
    if env is not None:
        fields["Env"] = env
    if workdir is not None:
        fields["WorkingDir"] = workdir
    made = _json(path, "POST", f"/containers/{container_id}/exec", 201, fields)
    exec_id = made.get("Id") if isinstance(made, dict) else None
    if not isinstance(exec_id, str) or not _hex(exec_id):
        raise Fallback("no exec id")
    return exec_id


def start(path: str, exec_id: str) -> tuple[_socket.socket, bytes]:
    """The started exec's connection, hijacked (its stream from here on), and the stream's
    first bytes, which came with the answer's head. engine_http.Unanswered when the start was
    sent but its answer never came: the engine may have started the command."""
    try:
        sock = engine_http.unix(path, TIMEOUT_S)
    except OSError:
        raise Fallback("the engine cannot be reached") from None
    try:
        status, first = engine_http.hijack(sock, "POST", f"/exec/{exec_id}/start",
                                           body=b'{"Tty":false,"Detach":false}')
    except engine_http.Unanswered:
        sock.close()
        raise  # the command may run: the full path would run it a second time
    except (OSError, engine_http.BadResponse):
        sock.close()
        raise Fallback("the start could not be sent") from None
    if status not in (101, 200):  # refused: nothing started
        sock.close()
        raise Fallback(f"the engine answered {status} to the start")
    sock.settimeout(None)  # a quiet command must not end the session
    return sock, first


def relay(sock: _socket.socket, first: bytes, stdout: BinaryIO, stderr: BinaryIO) -> None:
    """Copy the engine's frames (an 8-byte header: stream number, 3 zero bytes, big-endian
    size; then the data) to `stdout` and `stderr` until the stream ends. Memory held is
    bounded by CHUNK plus a header, whatever the frames claim. OutputFailed when writing
    here fails (other than a closed pipe)."""
    data, at, remaining, target = first, 0, 0, stdout
    view = memoryview(data)  # pieces written without a copy of their own
    while True:
        if at == len(data):
            data, at = sock.recv(CHUNK), 0
            if not data:
                return
            view = memoryview(data)
        if remaining == 0:
            if len(data) - at < 8:  # a header split across reads
                more = sock.recv(CHUNK)
                if not more:
                    return
                data, at = data[at:] + more, 0
                view = memoryview(data)
                continue
            target = stderr if data[at] == STDERR else stdout
            remaining = int.from_bytes(data[at + 4:at + 8], "big")
            at += 8
            continue
        end = min(len(data), at + remaining)
        try:
            target.write(view[at:end])
            target.flush()
        except BrokenPipeError:
            raise  # a reader gone: the CLI's edge ends quietly
        except OSError as exc:
            raise OutputFailed(exc.strerror or str(exc)) from None
        remaining -= end - at
        at = end


def feed(source: BinaryIO, sock: _socket.socket) -> None:
    """Copy `source` to the command's stdin, then half-close: the end of its input (as
    ContainerBackend._feed does; run on a daemon thread, it may block on a terminal)."""
    try:
        fd: int | None = source.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    try:
        while chunk := (os.read(fd, CHUNK) if fd is not None else source.read(CHUNK)):
            sock.sendall(chunk)
        sock.shutdown(_socket.SHUT_WR)
    except (OSError, ValueError):
        pass  # the command ended, or we hung up, first: the rest of the input is not wanted


def hang_up(sock: _socket.socket) -> None:
    """Close the hijacked connection; the shutdown wakes a feeder blocked in sendall."""
    try:
        sock.shutdown(_socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def exit_code(path: str, exec_id: str) -> int:
    """The command's exit status (1 when the engine has none); the engine may record it a
    moment after the output ended. OSError or BadResponse when the engine does not answer."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while True:
        info = _json(path, "GET", f"/exec/{exec_id}/json", 200)
        if not isinstance(info, dict):
            raise engine_http.BadResponse("an exec's state that is not a JSON object")
        if not info.get("Running") or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    code = info.get("ExitCode")
    return int(code) if isinstance(code, int) else 1


def _json(path: str, method: str, target: str, expected: int,
          fields: dict[str, object] | None = None) -> object:
    """One request, its answer decoded; Fallback for any other status or a broken answer."""
    body = None if fields is None else engine_json.dumps(fields).encode()
    try:
        answer = engine_http.request(engine_http.unix(path, TIMEOUT_S), method, target,
                                     limit=ANSWER_LIMIT, body=body)
        if answer.status != expected:
            raise Fallback(f"the engine answered {answer.status} to {method} {target}")
        return engine_json.loads(answer.body)
    except TimeoutError:
        raise Silent(f"no answer to {method} {target} in {TIMEOUT_S:g} s") from None
    except (OSError, ValueError, engine_http.BadResponse):
        raise Fallback(f"no usable answer to {method} {target}") from None


def _quote(text: str) -> str:
    return "".join(c if c in _URL_SAFE else "".join(f"%{b:02X}" for b in c.encode())
                   for c in text)


def _hex(text: str) -> bool:
    return 12 <= len(text) <= 64 and all(c in "0123456789abcdef" for c in text)
