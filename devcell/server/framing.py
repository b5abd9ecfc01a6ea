"""The framing of an exec stream (GET /api/v1/cells/NAME/exec upgraded to a WebSocket), shared
by the server (server/streams.py) and the Python client: plain Python, no imports.

Every message is binary: its first byte is the channel, the rest its payload.

- STDIN (client to server): bytes for the command's standard input; an empty payload ends
  it (the command reads end of file).
- STDOUT, STDERR (server to client): the command's output, at most MAX_OUTPUT bytes a
  message (with a terminal, both streams arrive on STDOUT).
- RESIZE (client to server, with a terminal): JSON {"rows": R, "columns": C}.
- ENV (client to server, the first message, only when the query declares variables by name
  alone, `env=NAME`): JSON {"NAME": "value", ...}, one value for each name declared and no
  other. Values sent here never appear in a URL (a proxy's access log, a server's request
  line); the Python client and the CLI send every value this way.
- NOTICE (server to client, before the command's output): DevCell's own words about the
  session, a UTF-8 line each (a sleeping cell woken for it, a runtime that drifted), which
  `devcell exec` writes on its standard error; a client may ignore them.
- STATUS (server to client, the last message): JSON {"exitCode": N}, or the problem document
  of an error met once the stream was open; the server then closes the connection (1000).

A port-forward stream (GET /api/v1/cells/NAME/portforward?port=N, server/forward.py) carries
one TCP connection to the cell's port in the same framing: STDIN the bytes to the port (an
empty payload: the client's end of writing, passed on as a half-close), STDOUT the bytes
from it (empty: the port's end of writing), NOTICE as above, and STATUS last: {"closed":
true} once both ways ended, or the problem document of what broke the connection.

A message is at most MAX_MESSAGE bytes (the server closes a larger one with 1009); a text
message or an unknown channel closes it with 1003.
"""

from __future__ import annotations

import json
from typing import Any

STDIN, STDOUT, STDERR, STATUS, RESIZE, NOTICE, ENV = 0, 1, 2, 3, 4, 5, 6
SUBPROTOCOL = "v1.exec.devcell.dev"
"""Offered by a client that speaks this framing (the server accepts it; none is needed)."""
PORT_SUBPROTOCOL = "v1.portforward.devcell.dev"
"""Offered by a client that speaks a port-forward stream (none is needed)."""
MAX_MESSAGE = 1 << 20
MAX_OUTPUT = 64 << 10
"""A STDOUT or STDERR message's payload at most: the command's output is cut in pieces."""
MAX_STDIN = 64 << 10
"""What the Python client sends in one STDIN message."""


def frame(channel: int, payload: bytes) -> bytes:
    return bytes((channel,)) + payload


def status(doc: dict[str, Any]) -> bytes:
    return frame(STATUS, json.dumps(doc, separators=(",", ":")).encode())


def split(message: bytes) -> tuple[int, bytes]:
    """(channel, payload); ValueError for an empty message."""
    if not message:
        raise ValueError("an empty message has no channel")
    return message[0], message[1:]


def size(payload: bytes) -> tuple[int, int] | None:
    """A RESIZE payload's (rows, columns), or None when it is not one (ignored: a wrong
    size is no reason to end a session)."""
    try:
        doc = json.loads(payload)
        rows, columns = int(doc["rows"]), int(doc["columns"])
    except (ValueError, TypeError, KeyError, OverflowError):
        return None
    return (rows, columns) if 0 < rows < 10000 and 0 < columns < 10000 else None
