"""What a cell's plan carries between its steps: its own module, so every controller that
plans work on a cell (the cell's, a restore's) makes one without importing another."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devcell.backends.base import CellRef


@dataclass
class CellWork:
    """What a cell's plan carries between its steps and finish()."""

    ref: CellRef
    sleep: dict[str, Any] | None = None
    """The sleep checkpoint taken by this plan (written to status.sleep)."""
    rootfs: dict[str, Any] | None = None
    """What keep-rootfs did (kept, or why not), said by finish()."""
