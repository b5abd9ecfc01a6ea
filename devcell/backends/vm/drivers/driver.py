"""The driver boundary of the vm backend: what a hypervisor must do for a cell, nothing more.

The backend (vm/backend.py) decides *what* a cell's machine is (its disks, kernel, memory, where it
lives) and *when* it boots, sleeps or wakes; a driver knows only *how* one hypervisor does
it. QEMU's microvm machine (vm/drivers/qemu.py) is the driver that runs here. A Firecracker driver fits
the same calls: `boot` is PUT /machine-config, /boot-source, /drives/{id}, /vsock and
/actions InstanceStart on its API socket; `save` is PATCH /vm {"state": "Paused"} then PUT
/snapshot/create (Full); `restore` is PUT /snapshot/load with resume_vm; the guest agent would
be reached over vsock instead of virtio-serial (vm/drivers/firecracker.py). Nothing here names QEMU.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from devcell.backends.vm.drivers.qmp import Agent


@dataclass(frozen=True)
class Disk:
    """A block device of the machine, in the order the guest sees them (vda, vdb, ...)."""

    path: Path
    format: str  # "qcow2" or "raw"
    read_only: bool = False


@dataclass(frozen=True)
class Forward:
    """A published port: connections to `host_ip`:`host_port` on the host reach the guest's
    `guest_port` (spec.network.ports)."""

    host_ip: str
    host_port: int
    guest_port: int


@dataclass(frozen=True)
class MachineConfig:
    """Everything a driver needs to start one machine."""

    name: str
    """The ownership label (devcell-<state-hash>-<cell-id>): how DevCell knows the process."""
    directory: Path
    """Owner-only: sockets, pidfile; nothing the guest can write."""
    kernel: Path
    initrd: Path
    cmdline: str
    memory_mib: int
    cpus: int
    disks: tuple[Disk, ...]
    accel: str
    """"kvm" or "tcg", chosen when the cell was made: a saved machine resumes under the same."""
    driver: str = "qemu-microvm"
    """The driver the cell was made with (vm_drivers.Dispatch routes each call by it)."""
    memory_file: Path | None = None
    """Guest RAM backed by this file (None: anonymous memory). Shared, the RAM *is* the file,
    so a save writes only device state and a restore maps the pages instead of reading them."""
    memory_shared: bool = True
    """False for a fork: the file is a snapshot's, mapped copy-on-write, never written."""
    mac: str | None = None
    """The MAC of the machine's one NIC, which has no peer (no network: it carries nothing)
    unless `network`; None for a machine made without one (before DevCell gave them, or a
    fork of such)."""
    network: bool = False
    """The NIC is connected to a network of the machine's own with no way out (QEMU's user
    networking, restricted), which carries `forwards` only. A saved machine resumes with the
    same (its state holds the network's)."""
    forwards: tuple[Forward, ...] = ()
    """The host ports published into the guest (with `network`)."""
    streams: int = 0
    """Virtio-serial ports for DevCell's stream helper (vm/streams.py), each a unix socket
    `streamsN.sock` in `directory`; 0 for a machine made before them (its saved state has
    none, so its resume must not add them)."""


@dataclass(frozen=True)
class Saved:
    """What `save` wrote: the machine's memory and device state."""

    path: Path
    size_bytes: int
    seconds: float
    memory_in_file: bool = False
    """The RAM stayed in config.memory_file (x-ignore-shared): `path` holds device state only,
    and a restore must map that file's pages (and ask for the same migration capability)."""


class MachineDriver(Protocol):
    name: str
    nic: bool
    """Whether its machines get a NIC without a peer, to carry their MAC (config.mac)."""

    def probe(self, kernel: Path, initrd: Path) -> str:
        """How guests run here ("kvm" or "tcg"): tried once per host boot, briefly."""
        ...

    def boot(self, config: MachineConfig) -> int:
        """Start the machine from its disks; the pid of its hypervisor process."""
        ...

    def restore(self, config: MachineConfig, saved: Path, *, memory_in_file: bool) -> int:
        """Start the machine from a saved state and let it run on; the pid. With
        `memory_in_file` the RAM is config.memory_file's pages (demand-paged), not in `saved`."""
        ...

    def save(self, config: MachineConfig, into: Path, *, keep: bool = False) -> Saved:
        """Pause the machine and write its device state (and its memory, unless the RAM is a
        shared file, which is flushed instead) to `into`; then end it, or with `keep` leave it
        paused for the caller to copy its files and `unpause`."""
        ...

    def agent_held(self, config: MachineConfig) -> AbstractContextManager[None]:
        """While the block runs, a client on the guest agent's port (best effort), so a state
        saved in it resumes with qemu-ga waiting in a read, not polling for a client."""
        ...

    def running(self, config: MachineConfig) -> bool:
        """Whether the guest's CPUs run (False while paused, saving, or gone)."""
        ...

    def paused(self, config: MachineConfig) -> bool:
        """Whether the hypervisor says the machine is paused (False when it cannot tell)."""
        ...

    def pause(self, config: MachineConfig) -> bool:
        """Stop the guest's CPUs (its devices stay active, so its disks can still be switched
        to new tops); whether it was running. A machine snapshot pauses first so that memory
        and disks are taken at one moment."""
        ...

    def unpause(self, config: MachineConfig) -> bool:
        """Let a paused machine's CPUs run again (left paused by a save that died); whether
        it was paused."""
        ...

    def shutdown(self, config: MachineConfig, pid: int, *, timeout: float) -> None:
        """End the machine (its disks stay): a clean power-off, killed after `timeout`."""
        ...

    def console(self, config: MachineConfig) -> bytes:
        """The guest's latest serial console output, bounded (the guest wrote it)."""
        ...

    def agent(self, config: MachineConfig, *, timeout: float,
              alive: Callable[[], bool] | None = None) -> Agent:
        """A connection to the guest agent, waiting up to `timeout` for it to answer, and
        no longer once `alive` says the machine stopped."""
        ...

    def snapshot_disk(self, config: MachineConfig, disk: int, overlay: Path) -> None:
        """Put a new empty qcow2 at `overlay` over the running machine's disk `disk` (index
        in config.disks): from now on the machine writes there, and the file below is frozen
        (a Firecracker driver: a Diff snapshot)."""
        ...

    def flatten_disk(self, config: MachineConfig, disk: int) -> None:
        """Copy everything below the running machine's disk `disk` into it, so it stands
        alone; returns when done."""
        ...
