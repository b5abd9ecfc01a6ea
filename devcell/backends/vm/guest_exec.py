"""What the guest agent says about a command it ran, checked before the host believes it.

qemu-ga answers guest-exec with `{"pid": N}` and guest-exec-status with `exited`, `exitcode`
or `signal`, and the output as base64 (at most 16 MiB a stream). Root in the guest can put
any program on the agent's port, so every field is checked for its type and range, and the
output is decoded from at most the characters 16 MiB needs: a reply of the wrong shape, base64
that is not, an exit status of -1 or 10**30 is a BackendError, never a traceback, and what is
decoded is bounded whatever the guest claims.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from devcell.backends.vm.drivers.qmp import said
from devcell.errors import BackendError

OUTPUT_LIMIT = 16 << 20
"""Bytes kept of each stream (qemu-ga's own cap on captured output)."""
_B64_CHARS = 4 * -(-OUTPUT_LIMIT // 3)
"""Base64 characters that hold OUTPUT_LIMIT bytes: no more are decoded."""


@dataclass(frozen=True)
class Finished:
    """A command that ended: its exit status (128 + signal when killed) and output."""

    code: int
    out: bytes
    err: bytes


def started_pid(reply: Any) -> int:
    """The guest pid in guest-exec's reply."""
    pid = reply.get("pid") if isinstance(reply, dict) else None
    if type(pid) is not int or pid <= 0:
        raise BackendError(f"the guest agent answered guest-exec with no process id: "
                           f"{said(reply)}")
    return pid


def finished(status: Any) -> Finished | None:
    """The command's end from guest-exec-status's reply, or None while it runs."""
    if not isinstance(status, dict):
        raise BackendError(f"the guest agent answered guest-exec-status with "
                           f"{said(status)}, not an object")
    if status.get("exited") is not True:
        return None
    return Finished(_code(status), _output(status, "out-data"), _output(status, "err-data"))


def _code(status: dict[str, Any]) -> int:
    code, signal = status.get("exitcode"), status.get("signal")
    if type(code) is int and 0 <= code <= 255:
        return code
    if code is None and type(signal) is int and 0 < signal < 128:
        return 128 + signal
    raise BackendError(f"the guest agent reported an impossible end: exit status "
                       f"{said(code)}, signal {said(signal)}")


def _output(status: dict[str, Any], field: str) -> bytes:
    data = status.get(field, "")
    if not isinstance(data, str):
        raise BackendError(f"the guest agent sent {field} that is not text")
    try:
        return base64.b64decode(data[:_B64_CHARS], validate=True)[:OUTPUT_LIMIT]
    except (binascii.Error, ValueError):
        raise BackendError(f"the guest agent sent {field} that is not base64") from None
