"""Helpers for the container backend's tests: specs, cell refs, bringing a cell up, waiting."""

from __future__ import annotations

import secrets
import textwrap
import time
from pathlib import Path
from typing import Any

from devcell.backends.base import CellRef
from devcell.backends.container.backend import ContainerBackend
from tests.backends.engine import IMAGE


def spec(**overrides: Any) -> dict[str, Any]:
    """A defaulted container Cell spec, as the validator would store it."""
    body: dict[str, Any] = {"backend": "container", "image": IMAGE, "state": "Running",
                            "workspace": {"mountPath": "/workspace"}, "services": [],
                            "network": {"mode": "none"}}
    body.update(overrides)
    return body


def cell(name: str = "c1", *, volume: bool = True, **overrides: Any) -> CellRef:
    suffix = secrets.token_hex(5)
    return CellRef(f"cell_t{suffix}", name, spec(**overrides),
                   f"vol_t{suffix}" if volume else None)


def up(backend: ContainerBackend, ref: CellRef, runtime_hash: str = "h1") -> None:
    """Volume, container, started: what the controller's create plan does."""
    if ref.volume_id is not None:
        backend.create_volume(ref, ref.volume_id, from_checkpoint=None)
    backend.create(ref, runtime_hash)
    backend.start(ref)


def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def box_manifest(directory: Path, *, service: str = "idle",
                 command: str = '[sleep, "600"]') -> Path:
    """A manifest of one container cell `box` (no network, one service) in `directory`."""
    path = directory / "box.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: box}}
        spec:
          backend: container
          image: {IMAGE}
          network: {{mode: none}}
          services:
            - name: {service}
              command: {command}
        """))
    return path
