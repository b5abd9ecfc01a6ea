"""What the field modules of `import devcontainer` (features, runArgs, lifecycle) use of
devcontainer.py's converter, as Protocols: the converter calls those modules, so they cannot
import it back (the layers' no-cycle contract), and one description serves them all."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from devcell.config import SecurityPolicy


class Reader(Protocol):
    """devcontainer.json as read: its path, and where a refusal is recorded (with its line)."""

    path: Path

    def refuse(self, message: str, *keys: str | int, shown: str | None = None) -> None: ...


class Converter(Protocol):
    """The conversion in progress: the file's data, the spec being made, what was noted and
    where each manifest field came from."""

    @property
    def r(self) -> Reader: ...

    data: dict[str, Any]
    spec: dict[str, Any]
    notes: list[str]
    origins: dict[str, tuple[str | int, ...]]
    annotations: dict[str, str]
    policy: SecurityPolicy
    out_dir: Path
    root: Path

    def note(self, key: str, why: str) -> None: ...

    def _filled(self, value: str, *keys: str | int, shown: str | None = None) -> str | None: ...

    def _filled_command(self, commands: list[list[str]], key: str
                        ) -> list[list[str]] | None: ...
