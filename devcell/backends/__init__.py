"""Backends, loaded by name from the backend registry (devcell/backend_registry.py) and
imported only when used (so `devcell get` stays fast).

This `__init__` runs before any module of a backend package loads, `devcell exec`'s fast path
(container/exec_socket.py) included, whose whole budget is a few milliseconds: so it imports
the registry, the error classes and importlib only when a function here is called (typing
alone costs ~2 ms; pathlib is for mypy only), and REGISTRY and PLANNED are made on first use
(`__getattr__`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy reads this as True
if TYPE_CHECKING:
    from pathlib import Path

    from devcell.backends.base import Backend, Capabilities, Observed
    from devcell.backends.capacity import Accounting

REGISTRY: dict[str, str]
"""Each backend's class (devcell/backend_registry.py holds everything else about it)."""
PLANNED: dict[str, str]
"""registry.PLANNED: backends designed, not in this version."""


def __getattr__(name: str) -> object:
    from devcell import backend_registry as registry

    if name == "REGISTRY":
        found = {entry.name: entry.implementation for entry in registry.BACKENDS}
        globals()["REGISTRY"] = found
        return found
    if name == "PLANNED":
        globals()["PLANNED"] = registry.PLANNED
        return registry.PLANNED
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_classes: dict[str, type] = {}


def _class(name: str) -> type:
    """The backend's class, imported once (finish() asks on every operation)."""
    if name in _classes:
        return _classes[name]
    import importlib

    from devcell import backend_registry as registry
    from devcell.errors import UnknownBackend

    entry = registry.get(name)
    target = None if entry is None else entry.implementation
    if target is None:
        if name in registry.PLANNED:
            raise UnknownBackend(f"backend {name} ({registry.PLANNED[name]}) is not available "
                                 "in this version of DevCell")
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
    from devcell.errors import BackendUnavailable

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
    cls = _class(name)
    if name == "container" and _clustered(state_dir):
        from devcell.backends.container.swarm_cells import SwarmBackend

        cls = SwarmBackend
    backend: Backend = cls(state_dir=state_dir)
    return backend


def _clustered(state_dir: Path) -> bool:
    """Whether the state directory controls a swarm (`cluster.engine`): its container cells
    are then the swarm's services (container/swarm_cells.py), not this engine's containers.
    No configuration file (the common case) costs one stat."""
    from devcell import config

    if not config.config_path(state_dir).exists():
        return False
    from devcell.backends.container.swarm_cells import settings

    return settings(state_dir) is not None


def holding(state_dir: Path, recorded: set[str]) -> list[str]:
    """The backends `recorded` (those the state database's cells name) and any other whose
    storage roots in `state_dir` hold something (a crash before the record, an older DevCell,
    a database restored from an old backup): what `devcell df` measures, `devcell gc`
    collects and the daemon's orphan sweep sweeps."""
    from devcell import backend_registry as registry

    names = set(recorded)
    for entry in registry.BACKENDS:
        if entry.name not in names and registry.held(state_dir, entry.roots):
            names.add(entry.name)
    return sorted(names)


def accounting(name: str, state_dir: Path) -> Accounting | None:
    """What measures backend `name`'s holdings in `state_dir`, or None when it keeps none."""
    import importlib

    from devcell import backend_registry as registry

    entry = registry.get(name)
    target = None if entry is None else entry.accounting
    if target is None or name == "container" and _clustered(state_dir):
        return None  # a cluster's workspaces are on its nodes' disks, not this one's
    module_name, _, class_name = target.partition(":")
    made: Accounting = getattr(importlib.import_module(module_name), class_name)(
        state_dir=state_dir)
    return made


def observe_all(name: str, state_dir: Path) -> dict[str, Observed]:
    """What backend `name` runs for `state_dir` right now, by cell id (one engine call)."""
    import importlib

    from devcell import backend_registry as registry
    from devcell.errors import UnknownBackend

    entry = registry.get(name)
    target = None if entry is None else entry.observer
    if target is None:
        _class(name)  # an unknown backend: its own error
        raise UnknownBackend(f"backend {name!r} cannot list its runtimes")
    if name == "container" and _clustered(state_dir):
        target = "devcell.backends.container.swarm_cells:observe_all"
    module_name, _, function = target.partition(":")
    observed: dict[str, Observed] = getattr(importlib.import_module(module_name),
                                            function)(state_dir)
    return observed
