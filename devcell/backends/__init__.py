"""Backends, registered by name and imported only when used (so `devcell get` stays fast)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from devcell.errors import BackendUnavailable, UnknownBackend

if TYPE_CHECKING:
    from devcell.backends.base import Accounting, Backend, Capabilities, Observed

REGISTRY: dict[str, str] = {
    "fake": "devcell.backends.fake:FakeBackend",
    "container": "devcell.backends.container:ContainerBackend",
    "vm": "devcell.backends.vm:VmBackend",
}
OBSERVERS: dict[str, str] = {
    "fake": "devcell.backends.fake:observe_all",
    "container": "devcell.backends.container_observe:observe_all",
    "vm": "devcell.backends.vm_observe:observe_all",
}
"""Each backend's `observe_all(state_dir)` (base.ObserveAll): its runtimes in one call,
importable without the backend's SDK (commands observe before they act, on the fast path)."""
MEASURERS: dict[str, str] = {
    "container": "devcell.backends.container_capacity:ContainerAccounting",
    "vm": "devcell.backends.vm_capacity:VmAccounting",
}
"""Each backend's Accounting (base.py) that keeps files or runtimes to measure, importable
without the backend's SDK and usable with its engine down (what lies on disk is measured
from the disk). A backend missing here keeps nothing to measure (the fake)."""
PLANNED: dict[str, str] = {}


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


def restores(name: str) -> bool:
    """Whether backend `name` can restore a workspace in place (base.Restoring)."""
    from devcell.backends.base import Restoring

    cls = _class(name)
    return callable(getattr(cls, "restore_workspace", None)) and issubclass(cls, Restoring)


def load(name: str, state_dir: Path) -> Backend:
    """An instance of backend `name` bound to `state_dir`."""
    backend: Backend = _class(name)(state_dir=state_dir)
    return backend


def holding(state_dir: Path, recorded: set[str]) -> list[str]:
    """The backends `recorded` (those the state database's cells name) and any other whose
    storage in `state_dir` holds something (a crash before the record, an older DevCell):
    what `devcell df` measures and `devcell gc` collects."""
    from devcell.backends.build_digest_cache import DIRECTORY as BUILD_DIGESTS
    from devcell.backends.container_layout import Layout

    names = set(recorded)
    if (state_dir / "backends" / "fake.db").exists():
        names.add("fake")
    layout = Layout(state_dir)
    kept = (layout.volumes, layout.checkpoints, state_dir / BUILD_DIGESTS)
    if any(p.is_dir() and not p.is_symlink() and any(p.iterdir()) for p in kept):
        names.add("container")
    return sorted(names)


def accounting(name: str, state_dir: Path) -> Accounting | None:
    """What measures backend `name`'s holdings in `state_dir`, or None when it keeps none."""
    target = MEASURERS.get(name)
    if target is None:
        return None
    module_name, _, class_name = target.partition(":")
    made: Accounting = getattr(importlib.import_module(module_name), class_name)(
        state_dir=state_dir)
    return made


def observe_all(name: str, state_dir: Path) -> dict[str, Observed]:
    """What backend `name` runs for `state_dir` right now, by cell id (one engine call)."""
    target = OBSERVERS.get(name)
    if target is None:
        _class(name)  # an unknown backend: its own error
        raise UnknownBackend(f"backend {name!r} cannot list its runtimes")
    module_name, _, function = target.partition(":")
    observed: dict[str, Observed] = getattr(importlib.import_module(module_name),
                                            function)(state_dir)
    return observed
