"""What a backend with the `exec` capability offers beyond the Backend protocol.

`devcell exec` and `devcell logs` use it; backends without it (the fake) are refused with
CapabilityMissing instead of a surprise.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from devcell.backends.base import Backend, CellRef
from devcell.errors import CapabilityMissing


@runtime_checkable
class Interactive(Protocol):
    def exec(self, cell: CellRef, argv: list[str], *, stdout: BinaryIO, stderr: BinaryIO
             ) -> int:
        """Run `argv` inside the running cell with its environment; its exit status."""
        ...

    def log_paths(self, cell: CellRef) -> dict[str, Path]:
        """Each service's log file on the host, by service name."""
        ...


def interactive(backend: Backend, backend_name: str) -> Interactive:
    if not backend.capabilities.exec or not isinstance(backend, Interactive):
        raise CapabilityMissing(f"backend {backend_name} cannot run commands or keep service "
                                "logs (capability exec); use a cell on the container backend")
    return backend
