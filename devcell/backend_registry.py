"""The registry of backends: everything DevCell knows about each backend, one entry each.

Every layer asks here instead of keeping a map of its own: the reconciler and the API load the
backend's class, observer and accounting from it; admission reads its limits; `devcell version`
runs its availability check; and the state directory's guard, `devcell df`, `devcell gc`, crash
recovery and the daemon's orphan sweep read the storage roots it keeps, so that what a backend
holds is found even when no record names it (a lost database, a crash before the commit).
Adding a backend means: its package under devcell/backends/, an entry here, and its tests
(tests/backends/test_registry.py walks every entry).

Pure data at the bottom layer, as kinds.py is: code is named by import path ("module:name")
and loaded only where it is used, so reading the registry imports nothing else.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from devcell.records import Record


class Limits(Record):
    """What a backend can run, as plain data admission reads before anything is recorded
    (devcell/backends/limits.py checks a Cell against it)."""

    min_memory_bytes: int = 1
    min_cpus: float = 0.0
    """Inclusive lower bound (the schema already refuses 0 and below)."""
    max_cpus: float | None = None
    reserved_mount_paths: tuple[str, ...] = ()
    """Paths the engine itself creates in every cell: no mount may sit at or below one."""
    cell_user: bool = True
    """Whether the backend runs a cell's commands as `spec.user` (else as root only)."""
    live_workspace: bool = True
    """Whether a cell's workspace may be a host folder bound live (workspace.source.hostPath)."""
    network_modes: tuple[str, ...] = ("none", "host", "bridge")
    """The spec.network.mode values it runs."""
    publish_ipv6: bool = True
    """Whether a published port may name an IPv6 hostIP."""
    publishing_drivers: tuple[str, ...] | None = None
    """The spec.vm.driver values that publish spec.network.ports (None: the backend has no
    drivers to choose)."""
    sidecars: bool = True
    """Whether the backend runs spec.sidecars (containers sharing the cell's network
    namespace) and spec.volumes (named volumes of the cell) (the fake records them)."""
    privileges: bool = True
    """Whether the backend grants spec.security (capabilities, security options, privileged,
    host devices: an engine's container arguments)."""


class Root(Record):
    """A place in the state directory where a backend keeps what it made for objects."""

    path: str
    """Relative to the state directory."""
    guarded: bool = True
    """Only a recorded object made what is here: a state directory that holds something here
    but has no database is refused (store/guard.py), never taken for a fresh install. False
    for a cache derived from records (dropping it loses nothing)."""
    temporaries: bool = False
    """Builds here go through `.tmp-<id>-<owner>-...` and removals through `.trash-...`
    (backends/host/temporaries.py): recovery removes those a dead process left."""
    file: bool = False
    """A record file (it holds something when not empty), not a directory of entries."""


class Backend(Record):
    """One backend. A record, as kinds.Kind is: this module loads on start-up paths."""

    name: str
    """As written in manifests: spec.backend."""
    implementation: str
    """`module:Class` of the backend (base.Backend), imported when a cell needs it."""
    observer: str
    """`module:function`, base.ObserveAll: its runtimes in one call, without its SDK."""
    availability: str
    """`module:function(state_dir)` returning availability.Availability: can this machine run
    it (for that state directory, where a backend keeps what it found, e.g. the vm probe)."""
    roots: tuple[Root, ...]
    accounting: str | None = None
    """`module:Class`, capacity.Accounting: measures its holdings with its engine down; None
    for a backend that keeps nothing to measure."""
    limits: Limits = Limits()


def _host_cpus() -> int:
    """Docker refuses `--cpus` above the CPUs its daemon sees (those of this machine)."""
    return os.cpu_count() or 1


_AVAILABILITY = "devcell.backends.availability"

BACKENDS: tuple[Backend, ...] = (
    Backend(
        name="fake",
        implementation="devcell.backends.fake:FakeBackend",
        observer="devcell.backends.fake:observe_all",
        availability=f"{_AVAILABILITY}:fake",
        roots=(Root("backends/fake.db", file=True),),
    ),
    Backend(
        name="container",
        implementation="devcell.backends.container.backend:ContainerBackend",
        observer="devcell.backends.container.observe:observe_all",
        availability=f"{_AVAILABILITY}:container",
        accounting="devcell.backends.container.capacity:ContainerAccounting",
        roots=(Root("volumes", temporaries=True),
               Root("images/checkpoints", temporaries=True),
               Root("containers"),
               Root("cluster/volumes"),  # a cluster's workspace records (swarm_cells.py)
               Root("build-digests", guarded=False),
               Root("features", guarded=False)),
        limits=Limits(
            min_memory_bytes=6 * 2**20,  # Docker: "Minimum memory limit allowed is 6MB"
            min_cpus=0.01,  # Docker: "Range of CPUs is from 0.01 to <host CPUs>"
            max_cpus=float(_host_cpus()),
            reserved_mount_paths=("/.dockerenv", "/.dockerinit"),
        ),
    ),
    Backend(
        name="vm",
        implementation="devcell.backends.vm.backend:VmBackend",
        observer="devcell.backends.vm.observe:observe_all",
        availability=f"{_AVAILABILITY}:vm",
        accounting="devcell.backends.vm.capacity:VmAccounting",
        # vm/images and vm/boot hold what is derived from an image and a kernel: not guarded
        # (vm/images' half-built root disks are temporaries all the same).
        roots=(Root("vm/images", guarded=False, temporaries=True),
               Root("vm/cells", temporaries=True),
               Root("vm/volumes", temporaries=True),
               Root("vm/layers"),  # its own `.<id>.tmp.qcow2`, redone by the next write
               Root("vm/checkpoints", temporaries=True),
               Root("vm/machines", temporaries=True)),
        # The backend gives a guest at least 128 MiB (vm/backend.py memory_mib): nothing to refuse.
        # Ports are published by QEMU's user networking (IPv4 host addresses only); the guest
        # has a network stack of its own, so it cannot share the host's.
        limits=Limits(cell_user=False, live_workspace=False, network_modes=("none", "bridge"),
                      publish_ipv6=False, publishing_drivers=("qemu",), sidecars=False,
                      privileges=False),
    ),
)

PLANNED: dict[str, str] = {}
"""Backends named in the design but not in this version: name -> what it would be."""

_BY_NAME = {backend.name: backend for backend in BACKENDS}


def get(name: str) -> Backend | None:
    return _BY_NAME.get(name)


def names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


def held(state_dir: Path, roots: Iterable[Root]) -> list[str]:
    """What `roots` hold in `state_dir`, as `vm/cells/ (2 entries)` or `backends/fake.db`:
    entries not starting with "." (a temporary or trash a dead process left is not the
    record of an object), or a record file that is not empty. Only read, never written, so
    a root that is a link (or under one) is looked through, as the backends would use it; a
    root that cannot be read (a loop of links, no permission) counts as held: the caller
    refuses rather than take it for empty."""
    found = []
    for root in roots:
        path = state_dir / root.path
        try:
            if root.file:
                if path.stat().st_size > 0:
                    found.append(root.path)
                continue
            with os.scandir(path) as entries:
                count = sum(1 for e in entries if not e.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            found.append(f"{root.path} (unreadable: {exc.strerror or exc})")
            continue
        if count:
            found.append(f"{root.path}/ ({count} entr{'y' if count == 1 else 'ies'})")
    return found
