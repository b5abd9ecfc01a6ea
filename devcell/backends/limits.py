"""What each backend can run, as plain data admission reads before anything is recorded.

A manifest the backend could never run (a memory limit below the engine's minimum, a mount
on a path the engine itself writes, a fork of another backend's checkpoint) is refused where
the user can fix it, with file, line and field, instead of failing late in a reconcile. The
records live in each backend's registry entry (devcell/backend_registry.py), not on the
backend classes, so checking them never imports an engine's SDK.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from devcell import backend_registry
from devcell.backend_registry import Limits
from devcell.backends.host import live_folder
from devcell.manifests import quantities

__all__ = ["Limits", "cell_problems", "of"]


def of(backend: str) -> Limits:
    """The limits of `backend` (none for a backend this version does not know)."""
    entry = backend_registry.get(backend)
    return Limits() if entry is None else entry.limits


FieldPath = tuple[str | int, ...]


def cell_problems(spec: dict[str, Any], backend: str) -> Iterator[tuple[FieldPath, str]]:
    """Every limit of `backend` a Cell spec breaks, as (field path, message)."""
    limits = of(backend)
    paths: list[tuple[FieldPath, Any]] = [
        (("spec", "workspace", "mountPath"), (spec.get("workspace") or {}).get("mountPath"))]
    paths += [(("spec", "mounts", i, "mountPath"), mount.get("mountPath"))
              for i, mount in enumerate(spec.get("mounts") or [])]
    paths += [(("spec", "volumes", i, "mountPath"), volume.get("mountPath"))
              for i, volume in enumerate(spec.get("volumes") or [])]
    for path, inside in paths:
        if not isinstance(inside, str):
            continue
        hidden = next((r for r in limits.reserved_mount_paths
                       if inside == r or inside.startswith(r + "/")), None)
        if hidden is not None:
            yield (path, f"{inside} is reserved by the {backend} backend (its engine writes "
                         f"{hidden} in every cell); choose another path")
    if not limits.sidecars:
        for key, what in (("sidecars", "sidecar containers"), ("volumes", "named volumes")):
            if spec.get(key):
                yield (("spec", key), f"the {backend} backend runs no {what} (a cell is one "
                                      f"machine); spec.{key} is for container cells")
    if spec.get("security") and not limits.privileges:
        yield (("spec", "security"), f"the {backend} backend runs a machine with a kernel of "
                                     "its own, where the cell's root has every privilege of "
                                     "its guest and no host device is passed through; "
                                     "spec.security is for container cells")
    if spec.get("user") and not limits.cell_user:
        yield (("spec", "user"), f"the {backend} backend runs a cell's commands as root; "
                                 "spec.user is for container cells")
    if spec.get("userEnvProbe", "none") != "none" and not limits.cell_user:
        yield (("spec", "userEnvProbe"), f"the {backend} backend runs a cell's commands as "
                                         "root, without probing a shell's environment; "
                                         "spec.userEnvProbe is for container cells")
    if not limits.live_workspace and live_folder.of_spec(spec) is not None:
        yield (("spec", "workspace", "source", "hostPath"),
               f"the {backend} backend keeps a workspace on its own disk: "
               f"{live_folder.NEEDS_CONTAINER}")
    yield from _network_problems(spec, backend, limits)
    yield from _resource_problems(spec.get("resources") or {}, ("spec", "resources"), backend,
                                  limits)
    for i, sidecar in enumerate(spec.get("sidecars") or []):
        if isinstance(sidecar, dict) and isinstance(sidecar.get("resources"), dict):
            yield from _resource_problems(sidecar["resources"],
                                          ("spec", "sidecars", i, "resources"), backend, limits)


def _resource_problems(resources: dict[str, Any], where: FieldPath, backend: str,
                       limits: Limits) -> Iterator[tuple[FieldPath, str]]:
    """spec.resources (or a sidecar's) against what the backend can run."""
    cpus = resources.get("cpus")
    if isinstance(cpus, int | float) and not isinstance(cpus, bool):
        if cpus < limits.min_cpus:
            yield ((*where, "cpus"),
                   f"must be at least {limits.min_cpus:g} on the {backend} backend")
        elif limits.max_cpus is not None and cpus > limits.max_cpus:
            yield ((*where, "cpus"),
                   f"must be at most {limits.max_cpus:g} on the {backend} backend (the CPUs "
                   "of this machine)")
    memory = resources.get("memory")
    if isinstance(memory, str):
        try:
            value = quantities.memory_bytes(memory)
        except ValueError:
            value = None  # validation has said why
        if value is not None and value < limits.min_memory_bytes:
            yield ((*where, "memory"),
                   f"memory limit {memory} is below the {backend} backend's minimum of "
                   f"{quantities.show_bytes(limits.min_memory_bytes)}")


def _network_problems(spec: dict[str, Any], backend: str, limits: Limits
                      ) -> Iterator[tuple[FieldPath, str]]:
    network = spec.get("network") or {}
    mode = network.get("mode", "none")
    if mode not in limits.network_modes:
        yield (("spec", "network", "mode"),
               f"the {backend} backend does not run network mode {mode} (its cells run "
               f"{' or '.join(limits.network_modes)}; host networking is for container cells)")
    ports = network.get("ports") or []
    driver = (spec.get("vm") or {}).get("driver", "qemu")
    if ports and limits.publishing_drivers is not None \
            and driver not in limits.publishing_drivers:
        yield (("spec", "network", "ports"),
               f"the {driver} driver publishes no ports (its machines have no network); use "
               f"spec.vm.driver {' or '.join(limits.publishing_drivers)}")
    if limits.publish_ipv6:
        return
    for i, port in enumerate(ports):
        address = str(port.get("hostIP", "127.0.0.1"))
        if ":" in address:
            yield (("spec", "network", "ports", i, "hostIP"),
                   f"the {backend} backend publishes ports on IPv4 addresses only; use "
                   "127.0.0.1")
