"""What a reconcile needs: the database, the backends (opened lazily) and why it runs."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from devcell import backends

if TYPE_CHECKING:
    from devcell.backends.base import Backend
    from devcell.store.db import Database


@dataclass
class Context:
    db: Database
    trigger: str = "apply"
    stopping: threading.Event | None = None
    """Set on graceful shutdown: finish the step in flight (and compensations), start no more."""
    _backends: dict[str, Backend] = field(default_factory=dict)

    def backend(self, name: str) -> Backend:
        if name not in self._backends:
            self._backends[name] = backends.load(name, self.db.state_dir)
        return self._backends[name]

    def close(self) -> None:
        for backend in self._backends.values():
            backend.close()
        self._backends.clear()
