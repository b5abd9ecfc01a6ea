"""Backends, registered by name and imported only when used (so `devcell get` stays fast)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from devcell.errors import BackendUnavailable, UnknownBackend

if TYPE_CHECKING:
    from devcell.backends.base import Backend, Capabilities

REGISTRY: dict[str, str] = {
    "fake": "devcell.backends.fake:FakeBackend",
    "container": "devcell.backends.container:ContainerBackend",
}
PLANNED = {"vm": "microVMs"}


_classes: dict[str, type] = {}


def _class(name: str) -> type:
    """The backend's class, imported once (finish() asks on every operation)."""
    if name in _classes:
        return _classes[name]
    target = REGISTRY.get(name)
    if target is None:
        if name in PLANNED:
            raise UnknownBackend(
                f"backend {name} ({PLANNED[name]}) is not available in this version of DevCell"
            )
        raise UnknownBackend(f"unknown backend {name!r}")
    module_name, _, class_name = target.partition(":")
    cls: type = getattr(importlib.import_module(module_name), class_name)
    _classes[name] = cls
    return cls


def parallelism(name: str) -> int:
    """Reconciles worth running at once on backend `name` (1 for unknown ones: they fail alike)."""
    return capabilities(name).parallel or 1


def capabilities(name: str) -> Capabilities:
    """What backend `name` declares it can do (none, for an unknown one)."""
    try:
        caps: Capabilities = _class(name).capabilities  # type: ignore[attr-defined]
    except BackendUnavailable:
        from devcell.backends.base import Capabilities as Nothing

        return Nothing()
    return caps


def load(name: str, state_dir: Path) -> Backend:
    """An instance of backend `name` bound to `state_dir`."""
    backend: Backend = _class(name)(state_dir=state_dir)
    return backend
