"""The vm backend: each cell a microVM, whose sleep keeps memory as well as disk.

A cell is one machine (vm/drivers/driver.py draws the hypervisor boundary; QEMU's microvm drives it
here) booted from the host's Debian cloud kernel with three disks: its root, a qcow2 overlay
on the image's shared read-only root disk (vm/image.py); its config (supervisor.sh and
secrets.env, mounted read-only at /devcell, as the container backend mounts them); its
workspace, a disk of its own (vm/disks.py). Commands run through qemu-guest-agent
(`guest-exec`), and a checkpoint freezes the guest's filesystems through it
(`guest-fsfreeze-freeze`), so disk checkpoints are `filesystem` consistent; sleep saves the
whole machine and a wake restores it, so processes go on where they were (`machine`).

Guest RAM is a file in the cell's directory (`ram.bin`, QEMU's memory-backend-file, shared):
sleep writes only the device state and flushes that file; a wake maps it again, so resume does
not read all of RAM first. A Snapshot asking for `consistency: machine` keeps a copy of it
with the device state, root and config disks (vm/memory.py) beside the workspace disk
checkpoint; a cell forked from one resumes from it (RAM mapped copy-on-write) as a new
machine: new hostname, machine-id, MAC (of its NIC, which is connected to nothing: cells
have no network) and a reseeded random generator (vm/reseed.py).

The cell's directory (<state>/vm/cells/<id>) is owner-only and nothing in it is written by
the guest except through QEMU's own sockets; what the guest says (agent replies, console) is
read with bounds. A QEMU process is acted on only when its -name is this cell's label.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import secrets
import shlex
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from devcell import failpoints, names, security
from devcell.backends import supervisor
from devcell.backends.base import (
    Capabilities,
    CellRef,
    CheckpointInfo,
    Consistency,
    Fill,
    Observed,
    Outputs,
    Owned,
    OwnedKind,
)
from devcell.backends.host import removal, temporaries, workspace_seed
from devcell.backends.interactive import ExecOptions, Terminal
from devcell.backends.vm import capacity as vm_capacity
from devcell.backends.vm import clock as vm_clock
from devcell.backends.vm import disks as vm_disks
from devcell.backends.vm import guest as vm_guest
from devcell.backends.vm import guest_exec as vm_exec
from devcell.backends.vm import image as vm_image
from devcell.backends.vm import logs as vm_logs
from devcell.backends.vm import memory as vm_memory
from devcell.backends.vm import network as vm_network
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm import reseed as vm_reseed
from devcell.backends.vm import streams as vm_streams
from devcell.backends.vm import streams_codec as vm_codec
from devcell.backends.vm import streams_relay
from devcell.backends.vm.drivers import choose as vm_drivers
from devcell.backends.vm.drivers import qmp as vm_qmp
from devcell.backends.vm.drivers.driver import Disk, MachineConfig, MachineDriver
from devcell.backends.vm.layers import qemu_img
from devcell.backends.vm.layout import VmLayout
from devcell.errors import (
    BackendError,
    BackendNotFound,
    BackendRefused,
    BackendUnavailable,
    CapabilityMissing,
)
from devcell.log import logger
from devcell.security import SERVICE_LOG_DIR

MARKER = "cell.json"
FROZEN = "frozen"
DEFAULT_MEMORY_MIB = 256
AGENT_BOOT_SECONDS = 120.0
"""How long a command waits for a machine that is still booting (TCG on a busy host)."""
AGENT_ANSWER_SECONDS = 30.0
"""How long a command waits for the agent of a machine that has booted (AGENT_SEEN): one
whose agent was stopped or hangs inside the guest is reported in this time, not after the
boot timeout."""
AGENT_SEEN = "agent-seen.json"
"""In the cell's directory: the pid of the QEMU whose guest agent has answered (or that was
resumed: its guest was running when saved), so its machine is past booting."""
CLOCK_AGENT_SECONDS = 10.0
"""How long a wake waits for a resumed guest's agent to set its clock (it was running)."""
CLOCK_SLACK_NS = 2_000_000_000
"""A resumed guest's clock this close to the host's was set (a sleep leaves it behind)."""
EXEC_OUTPUT = 16 << 20
HOOK_TIMEOUT_S = 60
STATUS_SECONDS = 60.0
"""How long guest-exec-status's reply (with the output) may take to arrive."""
HOOK_TAIL = 400
LOG_STAT_SECONDS = 30.0
"""How long the stat of a cell's logs may take in the guest (one per round of `logs`)."""
WORKSPACE_DISK = 2
"""The workspace's index among a machine's disks (root, config, workspace)."""
_HOSTNAME = re.compile(r"[^a-z0-9-]+")
_MAC = re.compile(r"52:54:00(:[0-9a-f]{2}){3}")
"""The MACs DevCell gives (new_mac); a record naming anything else is damaged."""
RAM_FILE = "ram.bin"
"""The cell's guest RAM (memory-backend-file, shared): what a sleep keeps and a wake maps."""
SAVED_MEMORY = "memory.json"
"""Beside a sleep's memory.bin: whether the RAM stayed in the cell's RAM_FILE."""
BUSYBOX = "/.devcell-guest/busybox"
SFTP_DIR = "/.devcell-guest/sftp"
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/.devcell-guest/bin"
RESEED = "/.devcell-guest/reseed"


def memory_mib(spec: dict[str, Any]) -> int:
    """Guest RAM: spec.resources.memory (bytes) in MiB, at least 128 (the kernel needs it);
    256 by default."""
    raw = (spec.get("resources") or {}).get("memory")
    if isinstance(raw, int) and raw > 0:
        return max(128, raw >> 20)
    return DEFAULT_MEMORY_MIB


def cpus(spec: dict[str, Any]) -> int:
    raw = (spec.get("resources") or {}).get("cpus")
    return max(1, int(raw)) if isinstance(raw, int | float) else 1


class VmBackend:
    name = "vm"
    capabilities = Capabilities(workspace_files=True, memory_state=True, block_diff=True,
                                exec=True, snapshot_consistency=Consistency.FILESYSTEM,
                                parallel=2)

    def __init__(self, *, state_dir: Path, driver: MachineDriver | None = None,
                 max_chain: int | None = None) -> None:
        self.layout = VmLayout(state_dir)
        self.disks = vm_disks.DiskStore(self.layout, max_depth=max_chain,
                                        busy=self._running_volumes)
        self.drivers = vm_drivers.Dispatch(accel_cache=self.layout.root / "accel.json")
        self.driver: MachineDriver = driver or self.drivers
        self.machines = vm_memory.MachineParts(self.layout)
        self._reads: dict[str, list[Path]] = {}
        """Checkpoint id -> trees `checkpoint_files` extracted and not yet released."""

    def close(self) -> None:
        for checkpoint_id in list(self._reads):
            self.release_checkpoint_files(checkpoint_id)

    # -- cells -----------------------------------------------------------------------------

    def _meta(self, cell_id: str) -> dict[str, Any] | None:
        return vm_disks.read_json(self.layout.cell(cell_id) / MARKER)

    def _allowed(self, config: MachineConfig) -> MachineConfig:
        """`config`, its host forwards judged again against DevCell's configuration as it
        is now: a machine saved while an address was allowed is not woken onto it after the
        administrator took that allowance back."""
        if not config.forwards:
            return config
        from devcell import config as devcell_config

        policy = devcell_config.load(self.layout.state_dir).security
        for forward in config.forwards:
            problem = security.publish_address_problem(forward.host_ip, policy)
            if problem:
                raise BackendRefused(f"refusing to start machine {config.name}: port "
                                     f"{forward.host_port}: {problem}")
        return config

    def _config(self, cell_id: str, meta: dict[str, Any]) -> MachineConfig:
        """The machine its record describes; a damaged record (a field missing or of the
        wrong type) is a BackendError that names it, not a KeyError."""
        try:
            return self._machine(cell_id, meta)
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendError(
                f"the machine record of cell {cell_id} ({self.layout.cell(cell_id) / MARKER}) "
                f"is damaged: {type(exc).__name__} {names.printable(str(exc))[:200]}; delete the "
                f"cell and apply it again") from None

    def _machine(self, cell_id: str, meta: dict[str, Any]) -> MachineConfig:
        directory = self.layout.cell(cell_id)
        disks = [Disk(directory / "root.qcow2", "qcow2"), Disk(directory / "config.img", "raw")]
        if meta.get("volume"):
            path, disk_format = self.disks.volume_drive(meta["volume"])
            disks.append(Disk(path, disk_format))
        # A fork runs on its snapshot's RAM (copy-on-write) until it next sleeps or stops.
        ram_from = meta.get("ram_from")
        mac = meta.get("mac")
        if mac is not None and not (isinstance(mac, str) and _MAC.fullmatch(mac)):
            raise ValueError(f"mac {mac!r} is not a MAC address")
        network = meta.get("network") is True and mac is not None
        return MachineConfig(
            name=self.layout.machine_name(cell_id), directory=directory,
            kernel=Path(meta["kernel"]), initrd=Path(meta["initrd"]),
            cmdline="console=ttyS0 quiet panic=-1" + _hostname_option(meta)
            + (f" {vm_guest.NET_OPTION}" if network else ""),
            memory_mib=int(meta["memory_mib"]),
            cpus=int(meta["cpus"]), disks=tuple(disks), accel=str(meta.get("accel", "tcg")),
            driver=str(meta.get("driver") or vm_drivers.DEFAULT),
            memory_file=Path(ram_from) if ram_from else directory / RAM_FILE,
            memory_shared=not ram_from, mac=mac,
            streams=vm_streams.PORTS if meta.get("streams") is True else 0,
            network=network, forwards=vm_network.of_record(meta) if network else ())

    def _update(self, cell_id: str, **changes: Any) -> dict[str, Any]:
        meta = self._meta(cell_id)
        if meta is None:
            raise BackendNotFound(f"cell {cell_id} has no machine")
        meta.update(changes)
        vm_disks.write_json(self.layout.cell(cell_id) / MARKER, meta)
        return meta

    def _pid(self, cell_id: str) -> int | None:
        return vm_proc.find(self.layout.cell(cell_id), self.layout.machine_name(cell_id))

    def _running_volumes(self) -> set[str]:
        """Volumes a running machine has open (their layers are never written by qemu-img)."""
        out = set()
        for entry in os.listdir(self.layout.cells):
            meta = None if entry.startswith(".") else self._meta(entry)
            if meta and meta.get("volume") and self._pid(entry) is not None:
                out.add(str(meta["volume"]))
        return out

    def observe(self, cell: CellRef) -> Observed:
        meta = self._meta(cell.id)
        pid = self._pid(cell.id)
        if meta is None:
            # A machine whose directory is gone (a crash mid-delete) still exists until killed.
            return Observed(exists=True, running=True) if pid is not None else Observed(False)
        running = pid is not None
        # Frozen: by quiesce (its marker), or paused by a save that died before QEMU quit.
        # ... or a fork resumed whose new identity was not given yet (a crash in between).
        frozen = running and ((self.layout.cell(cell.id) / FROZEN).exists()
                              or bool(meta.get("identity_pending"))
                              or self.driver.paused(self._config(cell.id, meta)))
        return Observed(exists=True, running=running, frozen=frozen,
                        runtime_hash=meta.get("runtime_hash"),
                        detail={"state": "running" if running else "stopped",
                                "accel": meta.get("accel")})

    def create(self, cell: CellRef, runtime_hash: str) -> Outputs:
        if self._meta(cell.id) is not None:
            return {"created": False}
        driver = self.drivers.for_spec(cell.spec) if self.driver is self.drivers else self.driver
        image = cell.spec.get("image") or ""
        image_hex, rootfs = vm_image.rootfs(self.layout, image)
        kernel = vm_image.find_kernel()
        initrd = vm_image.initrd(self.layout, kernel)
        accel = driver.probe(kernel.path, initrd)
        directory = self.layout.cell(cell.id)
        plain, secret = supervisor.split_env(cell.spec)
        # Plain variables are exported by the script itself (a container gets them from the
        # engine); secrets stay in secrets.env, as in a container.
        exports = "".join(f"export {k}={_quote(v)}\n" for k, v in plain.items())
        script = supervisor.render_script(cell.name, cell.spec).replace(
            "#!/bin/sh\n", "#!/bin/sh\n" + exports, 1)
        meta = {"cell_id": cell.id, "cell": cell.name, "runtime_hash": runtime_hash,
                "image": image, "image_id": image_hex, "volume": cell.volume_id,
                "kernel": str(kernel.path), "initrd": str(initrd), "accel": accel,
                "driver": driver.name,
                "memory_mib": memory_mib(cell.spec), "cpus": cpus(cell.spec),
                "mac": new_mac() if driver.nic else None, "operation": cell.op_id,
                "streams": driver.name == vm_drivers.DEFAULT,
                "created": time.time()}
        if driver.nic and vm_network.forwards(cell.spec):
            meta.update(network=True, forwards=vm_network.forwards(cell.spec))
        source = self._machine_source(cell)
        if source is not None:
            # The fork is its snapshot's machine: same RAM size, CPUs and accel, or the saved
            # device state would not load; its first start resumes from it.
            part = self.machines.meta(source) or {}
            meta.update({k: part[k] for k in ("memory_mib", "cpus", "accel", "kernel",
                                               "initrd")}, resume_from=source,
                        mac=new_mac() if part.get("nic") else None,
                        streams=part.get("streams") is True)
            # A machine saved with a network resumes only with one (its state holds the
            # network's): a fork that publishes nothing keeps one with no forwards.
            if part.get("network") is True and part.get("nic"):
                meta["network"] = True
            if not part.get("nic") and meta.get("network"):
                raise BackendRefused(
                    f"cell {cell.name} cannot publish ports: machine snapshot {source} was "
                    "taken of a machine made without a NIC; fork it with --no-ports")
        temporaries.remove_dead(self.layout.cells, f"{temporaries.TMP}{cell.id}-")
        tmp = self.layout.cells / temporaries.temp_name(cell.id)
        tmp.mkdir(mode=0o700)
        try:
            if source is not None:
                # The root and config disks as the snapshot's memory last saw them.
                for name in (vm_memory.ROOT, vm_memory.CONFIG):
                    vm_disks.copy_disk(self.machines.path(source) / name, tmp / name)
                    (tmp / name).chmod(0o600)
            else:
                self._new_disks(cell, tmp, rootfs, script, secret)
            vm_disks.write_json(tmp / MARKER, meta)
            if directory.exists():
                removal.remove(directory)  # no marker: a directory a crash left half made
            os.rename(tmp, directory)
        except BaseException:
            removal.remove_quietly(tmp)
            raise
        return {"created": True, "image_id": image_hex[:12], "accel": meta["accel"],
                "driver": driver.name, "machine_from": source}

    @staticmethod
    def _new_disks(cell: CellRef, tmp: Path, rootfs: Path, script: str,
                   secret: dict[str, str]) -> None:
        """A new cell's root overlay on the image and its config disk."""
        qemu_img(["create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(rootfs),
                   str(tmp / "root.qcow2")])
        config = tmp / "config"
        config.mkdir(mode=0o700)
        fd = os.open(config / supervisor.SECRETS, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                     0o600)
        with os.fdopen(fd, "w") as f:
            f.write(supervisor.render_secrets(secret))
        mount_path = str((cell.spec.get("workspace") or {}).get("mountPath") or "/workspace")
        for name, text in ((supervisor.SCRIPT, script), ("hostname", _hostname(cell.name) + "\n"),
                           ("mountpath", mount_path + "\n")):
            (config / name).write_text(text)
            (config / name).chmod(0o644)  # the guest's user reads them, whatever our umask
        vm_image.mkfs(config, tmp / "config.img", 8 << 20, "devcell-config")
        removal.remove(config)
        (tmp / "config.img").chmod(0o600)

    def _machine_source(self, cell: CellRef) -> str | None:
        """The machine snapshot this cell is forked from, when its workspace came from one."""
        volume = self.disks.volume_meta(cell.volume_id) if cell.volume_id else None
        source = (volume or {}).get("from_checkpoint")
        if not source or self.machines.meta(source) is None:
            return None
        return str(source)

    def _require(self, cell: CellRef) -> dict[str, Any]:
        meta = self._meta(cell.id)
        if meta is None:
            raise BackendNotFound(f"cell {cell.name} has no machine")
        return meta

    def start(self, cell: CellRef) -> Outputs:
        meta = self._require(cell)
        if self._pid(cell.id) is not None:
            return {"started": False}
        (self.layout.cell(cell.id) / FROZEN).unlink(missing_ok=True)
        (self.layout.cell(cell.id) / AGENT_SEEN).unlink(missing_ok=True)  # a new QEMU boots
        if meta.get("volume"):
            self.disks.mark_used(meta["volume"])
            self.disks.adopt(meta["volume"])  # a raw disk from the first slice -> a layer
        began = time.monotonic()
        source = meta.get("resume_from")
        if source and self.machines.meta(source) is not None:
            return self._resume_fork(cell, meta, str(source), began)
        if source or meta.get("ram_from"):
            # Its snapshot was deleted before the fork first ran: the disks are as the
            # snapshot's moment left them, so the machine boots from them (as after power loss).
            meta = self._update(cell.id, resume_from=None, ram_from=None)
        forwards = vm_network.forwards(cell.spec)
        if meta.get("mac") and (meta.get("network") is True, meta.get("forwards") or []) != (
                bool(forwards), forwards):
            # A boot has no saved network to match: the spec's ports as they are now (a cell
            # made before vm cells published them gets them at its next boot).
            meta = self._update(cell.id, network=bool(forwards), forwards=forwards)
        with self.disks.layers.making():  # no merge under a disk QEMU is opening
            pid = self.driver.boot(self._allowed(self._config(cell.id, meta)))
        return {"started": True, "pid": pid, "accel": meta.get("accel"),
                "driver": meta.get("driver"), "seconds": round(time.monotonic() - began, 3)}

    def _resume_fork(self, cell: CellRef, meta: dict[str, Any], source: str, began: float
                     ) -> Outputs:
        """A fork's first start: its snapshot's machine, resumed, then made a new machine."""
        part = self.machines.path(source)
        in_file = bool((self.machines.meta(source) or {}).get("memory_in_file"))
        meta = self._update(cell.id, ram_from=str(part / vm_memory.RAM) if in_file else None,
                            identity_pending=True)
        config = self._config(cell.id, meta)
        with self.disks.layers.making():  # no merge under a disk QEMU is opening
            pid = self.driver.restore(self._allowed(config), part / vm_memory.STATE,
                                      memory_in_file=in_file)
        self._saw_agent(cell.id, pid)  # its snapshot's guest was running: not booting
        meta = self._update(cell.id, resume_from=None)
        failpoints.hit("vm.fork.after-resume")
        resumed = round(time.monotonic() - began, 3)
        identity = self._new_identity(cell)
        return {"started": True, "pid": pid, "accel": meta.get("accel"),
                "driver": self.driver.name, "resumed_from": source, "seconds": resumed,
                **identity}

    def _new_identity(self, cell: CellRef) -> Outputs:
        """Make a resumed fork a machine of its own: the host's clock (the snapshot's stood
        still), hostname, machine-id, and its random generator reseeded from the host (else
        two forks of one snapshot draw the same bytes), and its NIC the MAC QEMU was given
        (the saved device state brought the parent's back)."""
        config = self._running_config(cell)
        name = _hostname(cell.name)
        machine_id = secrets.token_hex(16)
        # A fork that publishes ports has its NIC on its network (its parent's may not).
        up = "" if not config.network else (
            f" && {BUSYBOX} ip addr replace {vm_guest.GUEST_ADDRESS}/{vm_guest.GUEST_PREFIX} "
            f"dev \"${{n##*/}}\" && {BUSYBOX} ip link set dev \"${{n##*/}}\" up")
        mac = "" if config.mac is None else (
            f" && for n in /sys/class/net/*; do [ \"${{n##*/}}\" = lo ] || {{ "
            f"{BUSYBOX} ip link set dev \"${{n##*/}}\" address {config.mac}{up}; }} || exit 1; "
            f"done; {BUSYBOX} cat /sys/class/net/*/address")
        with self._agent(cell, config, timeout=AGENT_BOOT_SECONDS) as agent:
            # The program through the agent's file calls, not a process of its own: each
            # first fork and exec after a resume costs a tenth of a second under TCG.
            # A name of its own each time: the parent's root cannot have planted anything
            # there (a FIFO, a link) before the snapshot.
            reseed = f"{RESEED}-{secrets.token_hex(8)}"
            try:
                _write_guest_file(agent, reseed, vm_reseed.program(), mode="w")
            except BackendRefused as exc:
                raise BackendError(f"giving fork {cell.name} its own identity failed: "
                                   f"{exc}") from None
            # Its clock is set here, on this connection (one fewer), dated as it is sent.
            shown = self._identity_step(agent, cell, (
                f"{_clock_argv()} >/dev/null; {BUSYBOX} chmod 700 {reseed} && {reseed} && "
                f"{BUSYBOX} rm -f {reseed} && "
                f"{BUSYBOX} hostname {name} && echo {name} > /etc/hostname && "
                f"echo {machine_id} > /etc/machine-id{mac}"), vm_reseed.entropy())
        self._update(cell.id, identity_pending=False, machine_id=machine_id)
        # Claimed only when the guest's NIC shows it (its root may have unbound the driver
        # before the snapshot: then there is no interface to give it to).
        has_mac = config.mac is not None and config.mac.encode() in shown.split()
        if config.mac is not None and not has_mac:
            logger.bind(cell=cell.name).warning(
                "fork {} has no network interface to take its MAC {} (its parent unbound the "
                "NIC's driver): bound again, the NIC shows the parent's MAC", cell.name,
                config.mac)
        return {"hostname": name, "machine_id": machine_id, "reseeded": True,
                **({"mac": config.mac} if has_mac else {})}

    def _identity_step(self, agent: Any, cell: CellRef, script: str, data: bytes) -> bytes:
        """Run one identity script in the guest; what it printed (bounded by the agent)."""
        code, out, err = self._run(agent, [BUSYBOX, "sh", "-c", script], timeout=30.0,
                                   stdin=data)
        if code != 0:
            raise BackendError(f"giving fork {cell.name} its own identity failed "
                               f"(status {code}): {err.decode('utf-8', 'replace')[-200:]}")
        return out

    def _set_clock(self, config: MachineConfig) -> str | None:
        """A resumed guest's clock stopped when it was saved: set it to the host's, dated
        once the agent answers (its sync takes part of a second). Written to the guest's
        clock program (vm/clock.py: no process started in the guest, the agent's file calls
        only); where that is not there (a machine made before it), `date -s` through
        guest-exec, not the agent's guest-set-time (which refuses without /sbin/hwclock, as
        in a busybox image), waited for (a request sent just before the connection closes
        can be dropped by QEMU unread: seen, a guest 5 s behind after a wake). Either way
        the result is checked (guest-get-time, which starts nothing):
        a FIFO the guest replaced, or a program it killed, takes the bytes and sets nothing,
        and then `date -s` is used after all. How it was set, or None when it could not be
        (a guest whose agent does not answer within CLOCK_AGENT_SECONDS: it was running when
        saved, so it is not booting, and a wake is not held up for the boot timeout)."""
        try:
            with self.driver.agent(config, timeout=CLOCK_AGENT_SECONDS) as agent:
                if _clock_program_set(agent):
                    return "clock-program"
                # Waited for and checked too: a guest can keep resetting its own clock.
                self._run(agent, _clock_argv().split(), timeout=CLOCK_AGENT_SECONDS)
                if _clock_right(agent):
                    return "date"
                logger.warning("machine {}: its clock is not the host's after a wake (set "
                               "again from inside the guest?)", config.name)
        except (BackendError, OSError) as exc:
            logger.warning("machine {}: its clock was not set after the wake (its guest agent "
                           "did not answer: {}); it is behind by the time it slept",
                           config.name, exc)
        return None

    def stop(self, cell: CellRef) -> Outputs:
        meta = self._meta(cell.id)
        pid = self._pid(cell.id)
        if pid is None:
            return {"stopped": False}
        if meta is not None:
            config = self._config(cell.id, meta)
            self._sync(config)
            self.driver.shutdown(config, pid, timeout=10.0)
            # The RAM file of a machine that is off holds nothing anyone resumes.
            (self.layout.cell(cell.id) / RAM_FILE).unlink(missing_ok=True)
            if meta.get("ram_from"):
                self._update(cell.id, ram_from=None)
        else:
            vm_proc.kill(pid, self.layout.machine_name(cell.id))
        (self.layout.cell(cell.id) / FROZEN).unlink(missing_ok=True)
        self._collect()
        return {"stopped": True}

    def _collect(self) -> None:
        """Merge the layers that waited for this machine to stop (deleted snapshots under its
        disk); a failure leaves them for the next collect."""
        try:
            self.disks.collect()
        except (BackendError, OSError) as exc:
            logger.bind(state=str(self.layout.state_dir)).info("layers not collected: {}", exc)

    def _sync(self, config: MachineConfig) -> None:
        """Ask the guest to write its caches to its disks before the machine ends."""
        try:
            with self.driver.agent(config, timeout=3.0) as agent:
                agent.command("guest-fsfreeze-thaw")
                self._run(agent, ["/.devcell-guest/busybox", "sync"], timeout=10.0)
        except (BackendError, OSError, TimeoutError) as exc:
            logger.bind(machine=config.name).debug("no sync before stop: {}", exc)

    def delete(self, cell: CellRef) -> Outputs:
        self.stop(cell)
        directory = self.layout.cell(cell.id)
        if not directory.exists():
            return {"deleted": False}
        trash = temporaries.trash(self.layout.cells)
        os.rename(directory, trash)
        removal.remove_quietly(trash)
        return {"deleted": True}

    # -- the guest agent -------------------------------------------------------------------

    def _running_config(self, cell: CellRef) -> MachineConfig:
        meta = self._meta(cell.id)
        if meta is None or self._pid(cell.id) is None:
            raise BackendError(f"cell {cell.name} is not running; start it with "
                               f"`devcell cell start {cell.name}`")
        return self._config(cell.id, meta)

    def _usable_config(self, cell: CellRef) -> MachineConfig:
        """`_running_config` of a machine a user's command may use: not a fork still without
        its own identity (its start failed between the resume and the identity): that machine
        is its parent's copy, hostname, machine-id and random state alike."""
        config = self._running_config(cell)
        if (self._meta(cell.id) or {}).get("identity_pending"):
            raise BackendError(f"cell {cell.name} is a fork not yet given its own identity "
                               "(hostname, machine-id, random state: its start failed after "
                               "the resume); `devcell describe cell` says why, and the next "
                               "reconcile tries again")
        return config

    @contextlib.contextmanager
    def _agent(self, cell: CellRef, config: MachineConfig, *, timeout: float) -> Iterator[Any]:
        """The cell's guest agent; what fails in talking to it names the cell (the error
        keeps its class: unavailable is retried, a refusal is not). It is not waited for
        once the machine has stopped (slept, stopped or deleted meanwhile), nor longer than
        AGENT_ANSWER_SECONDS once the machine has booted."""
        pid = self._pid(cell.id)
        booted = pid is not None and self._agent_seen(cell.id) == pid
        wait = min(timeout, AGENT_ANSWER_SECONDS) if booted else timeout
        try:
            try:
                connected = self.driver.agent(config, timeout=wait,
                                              alive=lambda: self._pid(cell.id) is not None)
            except vm_qmp.AgentSilent:
                if booted and self._pid(cell.id) == pid:
                    raise BackendUnavailable(
                        f"the guest agent did not answer within {wait:.0f} s, though the "
                        "machine has booted, so its agent was stopped, hangs, is starved by "
                        "an overloaded guest, or its port is flooded from inside: if it stays "
                        "so, stop the cell (spec.state: Stopped, "
                        "then `devcell apply`) and start it again (Running) to boot it "
                        "afresh") from None
                raise
            with connected as agent:
                if not booted and pid is not None:
                    self._saw_agent(cell.id, pid)
                yield agent
        except BackendError as exc:
            if f"cell {cell.name}" not in str(exc):
                exc.args = (f"cell {cell.name}: {exc}", *exc.args[1:])
            raise

    def _runs_on(self, cell_id: str) -> bool:
        """Whether the machine still runs after its agent failed, watched for GONE_SECONDS:
        a QEMU a sleep or a delete is ending takes a moment to go."""
        deadline = time.monotonic() + vm_logs.GONE_SECONDS
        while self._pid(cell_id) is not None:
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.05)
        return False

    def _agent_seen(self, cell_id: str) -> int | None:
        seen = (vm_disks.read_json(self.layout.cell(cell_id) / AGENT_SEEN) or {}).get("pid")
        return seen if type(seen) is int else None

    def _saw_agent(self, cell_id: str, pid: int) -> None:
        """Record that this QEMU's machine is past booting (best effort: without it a
        command only waits the boot timeout for a silent agent, as before)."""
        try:
            vm_disks.write_json(self.layout.cell(cell_id) / AGENT_SEEN, {"pid": pid})
        except OSError as exc:
            logger.bind(cell=cell_id).debug("agent-seen marker not written: {}", exc)

    @staticmethod
    def _run(agent: Any, argv: list[str], *, timeout: float, stdin: bytes = b""
             ) -> tuple[int, bytes, bytes]:
        args: dict[str, Any] = {"path": argv[0], "arg": argv[1:], "capture-output": True}
        if stdin:
            args["input-data"] = base64.b64encode(stdin).decode()
        try:
            # Its request carries up to 22 MiB of base64 input: seconds to write under TCG.
            pid = vm_exec.started_pid(agent.command(
                "guest-exec", timeout=STATUS_SECONDS if stdin else 10.0, **args))
        except vm_qmp.ChannelTimeout as exc:
            raise vm_qmp.ChannelTimeout(f"{exc}; the command may have started in the guest "
                                        "(its end is unknown)") from None
        began = time.monotonic()
        deadline = began + timeout
        while True:
            # Its reply can be ~45 MiB (16 MiB a stream, base64): seconds through a virtio-serial
            # port under TCG on a busy host, so more than the default 10 s to arrive.
            done = vm_exec.finished(agent.command("guest-exec-status", timeout=STATUS_SECONDS,
                                                  pid=pid))
            if done is not None:
                return done.code, done.out, done.err
            if time.monotonic() > deadline:
                raise BackendError(f"{argv[0]} did not finish in {timeout:.0f} s")
            # Often for the first second (a short command: each poll is a round trip, but a
            # doubling wait overshot the end by up to half of it), then less.
            elapsed = time.monotonic() - began
            time.sleep(0.02 if elapsed < 1.0 else min(elapsed / 5, 0.2))

    def exec(self, cell: CellRef, argv: list[str], *, stdout: BinaryIO, stderr: BinaryIO,
             stdin: BinaryIO | None = None, terminal: Terminal | None = None,
             options: ExecOptions | None = None) -> int:
        """Run `argv` in the machine with the cell's environment: through its stream helper
        (`_stream_exec`), or, on a machine made before the stream ports, through its agent.

        The agent returns the output when the command ends (no streaming, no terminal), at
        most 16 MiB of each stream; standard input is read whole first. `options`'
        environment and working directory are set by a shell in the machine; commands run
        as root."""
        if not argv:
            raise BackendError("nothing to run: give a command after --")
        config = self._usable_config(cell)
        if config.streams:
            return self._stream_exec(cell, config, argv, stdout=stdout, stderr=stderr,
                                     stdin=stdin, terminal=terminal, options=options)
        if terminal is not None:
            raise CapabilityMissing(f"cell {cell.name} was made before vm cells had stream "
                                    "ports, so it offers no terminal (-t); run without -t, or "
                                    "delete the cell and apply it again")
        if options is not None:
            if options.user and options.user not in ("0", "root", "0:0"):
                raise CapabilityMissing(f"cell {cell.name} was made before vm cells had "
                                        "stream ports, so it runs commands as root only; "
                                        "delete the cell and apply it again for -u")
            argv = _with_options(argv, options)
        data = stdin.read(EXEC_OUTPUT + 1) if stdin is not None else b""
        if len(data) > EXEC_OUTPUT:
            raise BackendRefused("standard input for a vm cell is limited to 16 MiB")
        try:
            with self._agent(cell, config, timeout=AGENT_BOOT_SECONDS) as agent:
                code, out, err = self._run(agent, supervisor.exec_argv(argv), timeout=3600.0,
                                           stdin=data)
        except BackendUnavailable:
            if not self._runs_on(cell.id):  # slept, stopped or deleted under the command
                raise BackendError(f"cell {cell.name} is no longer running (asleep, stopped "
                                   "or deleted); the command's end is unknown") from None
            raise
        stdout.write(out)
        stdout.flush()
        stderr.write(err)
        stderr.flush()
        return code

    def _streams(self, cell: CellRef, config: MachineConfig) -> vm_streams.Connection:
        """This process's stream connection to the cell's machine (vm/streams.py): a booting
        guest's helper is waited for as its agent would be, and once it answers the machine
        is known past booting (the init starts the agent before the helper), so a silent
        agent is then reported in AGENT_ANSWER_SECONDS."""
        pid = self._pid(cell.id)
        booted = pid is not None and self._agent_seen(cell.id) == pid
        connection = vm_streams.connection(config.directory, cell.name,
                                           hello_seconds=vm_streams.HELLO_SECONDS if booted
                                           else AGENT_BOOT_SECONDS)
        if not booted and pid is not None:
            self._saw_agent(cell.id, pid)
        return connection

    def _stream_exec(self, cell: CellRef, config: MachineConfig, argv: list[str], *,
                     stdout: BinaryIO, stderr: BinaryIO, stdin: BinaryIO | None,
                     terminal: Terminal | None, options: ExecOptions | None) -> int:
        """`exec` through the stream helper: streamed both ways, a terminal on request, as
        the user asked (a name from the guest's /etc/passwd or uid[:gid])."""
        options = options or ExecOptions()
        wrapped = supervisor.exec_argv(_with_options(argv, options))
        env = (f"PATH={GUEST_PATH}", "HOME=/root",
               *((f"TERM={dict(options.env).get('TERM', 'xterm')}",) if terminal else ()))
        size = terminal.size() if terminal is not None else None
        request = vm_codec.ExecRequest(
            argv=tuple(wrapped), env=env, user=options.user or "",
            terminal=(size or (0, 0)) if terminal is not None else None)
        return streams_relay.run(self._streams(cell, config), request,
                                 names.printable(argv[0])[:100], stdout=stdout,
                                 stderr=stderr, stdin=stdin, terminal=terminal,
                                 hang_up=options.hang_up)

    def open_port(self, cell: CellRef, port: int) -> socket.socket:
        """A connection to `port` on the guest's own 127.0.0.1, made by its stream helper
        (the machine has no network: nothing else reaches it)."""
        config = self._usable_config(cell)
        if not config.streams:
            raise CapabilityMissing(f"cell {cell.name} was made before vm cells had stream "
                                    "ports; delete it and apply it again to forward ports")
        return streams_relay.open_port(self._streams(cell, config), port)

    def listen_port(self, cell: CellRef, address: str, port: int) -> socket.socket:
        raise CapabilityMissing("a port listening inside a vm cell (ssh -R) is not offered: "
                                "its machine has no network for the helper to listen on "
                                "beyond its own loopback; use -L")

    def subsystem(self, cell: CellRef, name: str, home: str) -> list[str] | None:
        """SSH's sftp subsystem as OpenSSH's sftp-server inside the guest (copied there with
        its libraries): every path resolves in the guest, the host opens none of its files."""
        if name != "sftp":
            return None
        config = self._usable_config(cell)
        if not config.streams:
            return None
        return [SFTP_DIR + "/ld-linux-x86-64.so.2", "--library-path", SFTP_DIR,
                SFTP_DIR + "/sftp-server", "-d", home]

    def log_sources(self, cell: CellRef) -> vm_logs.GuestLogs:
        """The services' logs on the machine's disk, read through its agent (vm/logs.py);
        only while it runs (asleep or stopped, its disk is not read from the host)."""
        meta = self._meta(cell.id)
        if meta is None or self._pid(cell.id) is None:
            raise BackendError(
                f"cell {cell.name} is not running: its service logs are on the machine's "
                f"disk ({SERVICE_LOG_DIR}), read through its guest agent; start it with "
                f"`devcell cell start {cell.name}` to read them")
        config = self._usable_config(cell)
        return vm_logs.GuestLogs(
            cell.name, supervisor.service_names(cell.spec),
            agent=lambda: self._agent(cell, config, timeout=AGENT_BOOT_SECONDS),
            run=lambda agent, argv: self._run(agent, argv, timeout=LOG_STAT_SECONDS),
            running=lambda: self._pid(cell.id) is not None)

    def _run_hooks(self, cell: CellRef, agent: Any, which: str) -> int:
        """The cell's `which` hooks (preCheckpoint, postCheckpoint) through the agent, as the
        container backend runs them: a failing one fails the step, secrets redacted."""
        hooks = [list(h) for h in ((cell.spec.get("hooks") or {}).get(which) or [])]
        limit = float((cell.spec.get("hooks") or {}).get("timeoutSeconds", HOOK_TIMEOUT_S))
        for argv in hooks:
            code, out, err = self._run(agent, supervisor.exec_argv(argv), timeout=limit)
            if code != 0:
                tail = (out + err)[-HOOK_TAIL:].decode("utf-8", "replace")
                for value in supervisor.split_env(cell.spec)[1].values():
                    if len(value) >= 4:  # a hook that prints a secret must not record it
                        tail = tail.replace(value, "<redacted>")
                raise BackendError(f"{which} hook {argv!r} of cell {cell.name} exited with "
                                   f"status {code}" + (f": {tail}" if tail else ""))
        return len(hooks)

    # -- checkpoints -----------------------------------------------------------------------

    def quiesce(self, cell: CellRef) -> Outputs:
        if self._pid(cell.id) is None:
            return {"frozen": False}
        config = self._running_config(cell)
        with self._agent(cell, config, timeout=AGENT_BOOT_SECONDS) as agent:
            hooks = self._run_hooks(cell, agent, "preCheckpoint")
            (config.directory / FROZEN).touch(mode=0o600)
            frozen = agent.command("guest-fsfreeze-freeze", timeout=60.0)
        return {"frozen": True, "filesystems": frozen if type(frozen) is int else 0,
                "hooks": hooks}

    def resume(self, cell: CellRef) -> Outputs:
        marker = self.layout.cell(cell.id) / FROZEN
        unpaused = False
        if self._pid(cell.id) is not None and self.driver.paused(self._running_config(cell)):
            unpaused = self.driver.unpause(self._running_config(cell))
        meta = self._meta(cell.id) or {}
        if meta.get("identity_pending") and self._pid(cell.id) is not None:
            # A fork resumed by a start that died before it had its own identity.
            identity = self._new_identity(cell)
            return {"resumed": True, **identity}
        if not marker.exists():
            return {"resumed": unpaused}
        if self._pid(cell.id) is not None:
            config = self._running_config(cell)
            with self._agent(cell, config, timeout=AGENT_BOOT_SECONDS) as agent:
                agent.command("guest-fsfreeze-thaw", timeout=60.0)
                marker.unlink(missing_ok=True)
                self._run_hooks(cell, agent, "postCheckpoint")
        marker.unlink(missing_ok=True)
        return {"resumed": True}

    def checkpoint(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo:
        found = self.find_checkpoint(checkpoint_id)
        if found is not None:
            return found
        volume = cell.volume_id or (self._meta(cell.id) or {}).get("volume")
        if not volume:
            raise BackendRefused(f"cell {cell.name} has no workspace disk to checkpoint")
        marker = self.layout.cell(cell.id) / FROZEN
        running = self._pid(cell.id) is not None
        freeze_here = running and not marker.exists()
        if freeze_here:
            self.quiesce(cell)
        switch = flatten = None
        if running:
            config = self._running_config(cell)
            disk = WORKSPACE_DISK

            def switch(overlay: Path) -> None:
                self.driver.snapshot_disk(config, disk, overlay)

            def flatten() -> None:
                self.driver.flatten_disk(config, disk)
        try:
            meta = self.disks.checkpoint_disk(volume, checkpoint_id, cell_id=cell.id,
                                              cell_name=cell.name, switch=switch,
                                              flatten=flatten)
        finally:
            if freeze_here:
                self.resume(cell)
        return self._info(checkpoint_id, meta)

    def _info(self, checkpoint_id: str, meta: dict[str, Any]) -> CheckpointInfo:
        """A sleep's saved machine, or a disk checkpoint: `machine` when a machine part was
        taken with it (a snapshot that keeps memory), else `filesystem`."""
        size = int(meta.get("size_bytes", 0))
        machine = meta.get("kind") == vm_disks.KIND_MACHINE
        if not machine and self.machines.meta(checkpoint_id) is not None:
            machine = True
            size += self.machines.size(checkpoint_id)
        return CheckpointInfo(checkpoint_id,
                              Consistency.MACHINE if machine else Consistency.FILESYSTEM,
                              size, int(meta.get("files", 0)))

    def checkpoint_exists(self, checkpoint_id: str) -> bool:
        return self.disks.checkpoint_meta(checkpoint_id) is not None

    def find_checkpoint(self, checkpoint_id: str) -> CheckpointInfo | None:
        """The checkpoint as taken; a machine snapshot's disk half without its memory (a
        crash between them) is none yet: the controller retakes rather than adopts it."""
        meta = self.disks.checkpoint_meta(checkpoint_id)
        if meta is None or (meta.get("for_machine")
                            and self.machines.meta(checkpoint_id) is None):
            return None
        return self._info(checkpoint_id, meta)

    def delete_checkpoint(self, checkpoint_id: str) -> Outputs:
        existed = self.checkpoint_exists(checkpoint_id)
        self.disks.delete_checkpoint(checkpoint_id)
        # Forks running on its RAM keep their mapping (an unlinked file lives while mapped).
        self.machines.delete(checkpoint_id)
        return {"deleted": existed}

    def checkpoint_files(self, checkpoint_id: str) -> Path | None:
        """The checkpoint disk's files as a tree, read out of the guest-written ext4 for
        this read by vm_extract (never mounted, nothing followed, bounded) and removed by
        `release_checkpoint_files`."""
        meta = self.disks.checkpoint_meta(checkpoint_id)
        if meta is None or meta.get("kind") != vm_disks.KIND_DISK:
            raise BackendNotFound(f"checkpoint {checkpoint_id} does not exist")
        tree = self.disks.files_of(checkpoint_id)
        self._reads.setdefault(checkpoint_id, []).append(tree)
        return tree

    def checkpoint_sidecars(self, checkpoint_id: str) -> Path | None:
        """A vm cell has no sidecars."""
        return None

    def release_checkpoint_files(self, checkpoint_id: str) -> None:
        """The read is over: its extracted tree goes (no copy of the disk's files stays)."""
        for tree in self._reads.pop(checkpoint_id, []):
            self.disks.release_files(tree)

    def import_checkpoint(self, checkpoint_id: str, *, cell_id: str, cell_name: str,
                          fill: Fill) -> CheckpointInfo:
        meta = self.disks.import_checkpoint(checkpoint_id, cell_id=cell_id,
                                            cell_name=cell_name, fill=fill)
        return self._info(checkpoint_id, meta)

    # -- the machine: sleep and wake -------------------------------------------------------

    def save_machine(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo:
        found = self.disks.checkpoint_meta(checkpoint_id)
        if found is not None and found.get("kind") == vm_disks.KIND_MACHINE \
                and self._pid(cell.id) is None:
            return self._info(checkpoint_id, found)
        config = self._running_config(cell)
        if (config.directory / FROZEN).exists():
            self.resume(cell)

        def save(into: Path) -> Any:
            saved = self.driver.save(config, into)
            vm_disks.write_json(into.with_name(SAVED_MEMORY),
                                {"memory_in_file": saved.memory_in_file})
            return saved

        meta = self.disks.checkpoint_machine(checkpoint_id, cell_id=cell.id,
                                             cell_name=cell.name, save=save)
        # A fork's RAM was private, so it was saved whole: its wake loads it into its own file.
        if (self._meta(cell.id) or {}).get("ram_from"):
            self._update(cell.id, ram_from=None)
        return self._info(checkpoint_id, meta)

    def restore_machine(self, cell: CellRef, checkpoint_id: str) -> Outputs:
        meta = self._require(cell)
        if self._pid(cell.id) is not None:
            return {"restored": False}
        saved = self.disks.checkpoint_meta(checkpoint_id)
        if saved is None or saved.get("kind") != vm_disks.KIND_MACHINE:
            raise BackendNotFound(f"machine checkpoint {checkpoint_id} does not exist")
        directory = self.layout.checkpoint(checkpoint_id)
        in_file = bool((vm_disks.read_json(directory / SAVED_MEMORY) or {}).get(
            "memory_in_file"))
        began = time.monotonic()
        config = self._config(cell.id, meta)
        with self.disks.layers.making():  # no merge under a disk QEMU is opening
            pid = self.driver.restore(self._allowed(config), directory / vm_disks.MEMORY,
                                      memory_in_file=in_file)
        seconds = round(time.monotonic() - began, 3)
        self._saw_agent(cell.id, pid)  # its guest was running when saved: not booting
        clock = self._set_clock(config)
        # The machine ran on from that memory: restoring it twice would rewind a live disk.
        self.disks.delete_checkpoint(checkpoint_id)
        return {"restored": True, "pid": pid, "seconds": seconds, "accel": meta.get("accel"),
                "clock": clock}

    def snapshot_machine(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo:
        """A snapshot that keeps memory, all at one paused moment: the guest's CPUs stop, the
        workspace disk is switched to a new top (QMP blockdev-snapshot-sync: the frozen layer
        is the snapshot's disk, so forks open it read-only under their own overlays), then the
        device state and RAM are saved (vm/memory.py) and the machine runs on (also when this
        fails). The switch comes before the migration: after it QEMU's disks are inactive."""
        found = self.find_checkpoint(checkpoint_id)
        if found is not None and found.consistency is Consistency.MACHINE:
            return found
        if found is not None:
            raise BackendRefused(f"checkpoint {checkpoint_id} exists without memory")
        if self.disks.checkpoint_meta(checkpoint_id) is not None:
            # A disk half whose snapshot died before the memory: take both again (the
            # machine has run on since, so that disk is not its moment any more).
            self.disks.delete_checkpoint(checkpoint_id)
        volume = cell.volume_id or (self._meta(cell.id) or {}).get("volume")
        if not volume:
            raise BackendRefused(f"cell {cell.name} has no workspace disk to snapshot")
        config = self._running_config(cell)
        meta = self._meta(cell.id) or {}
        if (config.directory / FROZEN).exists() or self.driver.paused(config):
            self.resume(cell)  # left frozen, or paused by a save that died: run on first
        began = time.monotonic()

        def fill(tmp: Path) -> dict[str, Any]:
            saved = self.driver.save(config, tmp / vm_memory.STATE, keep=True)
            saved_at = time.monotonic()
            if saved.memory_in_file and config.memory_file is not None:
                vm_disks.copy_disk(config.memory_file, tmp / vm_memory.RAM)
            for name in (vm_memory.ROOT, vm_memory.CONFIG):
                vm_disks.copy_disk(config.directory / name, tmp / name)
            return {"checkpoint": checkpoint_id, "cell_id": cell.id, "cell": cell.name,
                    "taken": time.time(), "memory_in_file": saved.memory_in_file,
                    **{k: meta[k] for k in ("memory_mib", "cpus", "accel", "kernel", "initrd")},
                    "nic": config.mac is not None, "streams": config.streams > 0,
                    "network": config.network,
                    "save_seconds": round(saved_at - began, 3)}

        # The agent's port held through the pause: forks resume with qemu-ga waiting in a read.
        with self.driver.agent_held(config):
            self._snapshot_paused(config, cell, volume, checkpoint_id, fill)
        info = self.find_checkpoint(checkpoint_id)
        if info is None:
            raise BackendError(f"machine snapshot {checkpoint_id} was not kept")
        return info

    def _snapshot_paused(self, config: MachineConfig, cell: CellRef, volume: str,
                         checkpoint_id: str, fill: Callable[[Path], dict[str, Any]]) -> None:
        """The disk switched and the memory saved, all while the guest's CPUs are stopped."""

        def switch(overlay: Path) -> None:
            self.driver.snapshot_disk(config, WORKSPACE_DISK, overlay)

        def flatten() -> None:
            self.driver.flatten_disk(config, WORKSPACE_DISK)

        try:
            self.driver.pause(config)
            self.disks.checkpoint_disk(volume, checkpoint_id, cell_id=cell.id,
                                       cell_name=cell.name, switch=switch, flatten=flatten,
                                       for_machine=True)
            failpoints.hit("vm.snapshot.after-disk")
            try:
                self.machines.take(checkpoint_id, fill)
            except BaseException:
                # No memory to go with it: the disk half alone would claim a machine moment.
                self.disks.delete_checkpoint(checkpoint_id)
                raise
            failpoints.hit("vm.snapshot.after-memory")
        finally:
            self.driver.unpause(config)

    # -- volumes ---------------------------------------------------------------------------

    def volume_exists(self, volume_id: str) -> bool:
        return self.disks.volume_meta(volume_id) is not None

    def create_volume(self, cell: CellRef, volume_id: str, *, from_checkpoint: str | None
                      ) -> Outputs:
        meta = self.disks.create_volume(cell_id=cell.id, cell_name=cell.name,
                                        volume_id=volume_id, from_checkpoint=from_checkpoint,
                                        op_id=cell.op_id,
                                        seed=None if from_checkpoint else
                                        self._seed(cell))
        return {"volume": volume_id, "storage": "disk",
                "from_checkpoint": meta.get("from_checkpoint")}

    def _seed(self, cell: CellRef) -> workspace_seed.Seed | None:
        """What a new workspace starts with, judged again now (workspace_seed.checked)."""
        from devcell.backends.host import git_source

        seed = workspace_seed.of_spec(cell.spec, host_credentials=git_source.host_credentials(
            cell.owner, self.layout.state_dir, cell.spec.get("sharedWith")))
        return None if seed is None else workspace_seed.checked(seed, self.layout.state_dir)

    def delete_volume(self, volume_id: str) -> Outputs:
        existed = self.volume_exists(volume_id)
        self.disks.delete_volume(volume_id)
        return {"deleted": existed}

    def volumes_of(self, cell_id: str) -> list[str]:
        return [v for v, meta in self.disks.all_volumes() if meta.get("cell_id") == cell_id]

    def workspace_changed_since(self, volume_id: str, checkpoint_id: str | None) -> bool:
        return self.disks.changed_since(volume_id, checkpoint_id)

    # -- what is ours ----------------------------------------------------------------------

    def list_owned(self) -> list[Owned]:
        out: list[Owned] = []
        cells = {entry for entry in os.listdir(self.layout.cells)
                 if not entry.startswith(".") and self._meta(entry) is not None}
        prefix = self.layout.name_prefix
        running = {name.removeprefix(prefix): pid for name, pid in vm_proc.scan(prefix).items()}
        for cell_id in sorted(cells | set(running)):
            # A machine's root disk and memory may hold the user's work (files written
            # outside the workspace, processes): never removed or ended without a recorded
            # decision, so each is listed with what it holds (the sweep keeps it, gc asks).
            where = str(self.layout.cell(cell_id)) if cell_id in cells else None
            machine = (f"its machine running (QEMU pid {running[cell_id]})"
                       if cell_id in running else None)
            held = ", with ".join(part for part in (where, machine) if part)
            out.append(Owned(OwnedKind.CELL, cell_id, cell_id, held))
        for kind, entries, parent in (
                (OwnedKind.VOLUME, self.disks.all_volumes(), self.layout.volumes),
                (OwnedKind.CHECKPOINT, self.disks.all_checkpoints(), self.layout.checkpoints)):
            for resource_id, meta in entries:
                content = str(parent / resource_id) if meta.get("used") else None
                out.append(Owned(kind, resource_id, str(meta.get("cell_id")), content))
        # A machine part whose disk checkpoint was never taken (a crash in between).
        disks = {resource_id for resource_id, _ in self.disks.all_checkpoints()}
        for resource_id, meta in self.machines.all():
            if resource_id not in disks:
                out.append(Owned(OwnedKind.CHECKPOINT, resource_id, str(meta.get("cell_id"))))
        return out

    def exclusive_bytes(self, kind: OwnedKind, resource_id: str) -> int:
        """What removing a volume or checkpoint would free: its layers no other chain needs."""
        return vm_capacity.VmAccounting(state_dir=self.layout.state_dir).exclusive_bytes(
            kind, resource_id)

    def console(self, cell: CellRef) -> bytes:
        """The machine's latest serial console output (at most 64 KiB, as the guest wrote it)."""
        meta = self._require(cell)
        return self.driver.console(self._config(cell.id, meta))


def _clock_program_set(agent: Any) -> bool:
    """The host's time written to the guest's clock program, and the guest's clock then
    right; False when the guest has no FIFO (a machine made before the program) or the
    clock did not move (the program killed, the FIFO replaced)."""
    try:
        _write_guest_file(agent, vm_clock.FIFO, vm_clock.now())
    except BackendRefused:
        return False
    return _clock_right(agent)


def _clock_right(agent: Any, *, tries: int = 10) -> bool:
    """Whether the guest's clock is within CLOCK_SLACK_NS of the host's, asked a few times
    (the clock program runs once the agent has written to it, not before the reply)."""
    for attempt in range(tries):
        guest = agent.command("guest-get-time")
        if type(guest) is int and abs(guest - time.time_ns()) < CLOCK_SLACK_NS:
            return True
        if attempt < tries - 1:
            time.sleep(0.02)
    return False


def _write_guest_file(agent: Any, path: str, data: bytes, *, mode: str = "r+") -> None:
    """`data` written to a file in the guest: by default an existing one, opened read-write
    (a FIFO's open then never waits for a reader), "w" to create or truncate it;
    BackendRefused when the guest does not open it (no such file)."""
    try:
        handle = vm_qmp.file_handle(agent.command("guest-file-open", path=path, mode=mode))
    except BackendUnavailable:
        raise
    except BackendError as exc:
        raise BackendRefused(str(exc)) from None
    try:
        agent.command("guest-file-write", handle=handle,
                      **{"buf-b64": base64.b64encode(data).decode()})
    finally:
        agent.command("guest-file-close", handle=handle)


def _clock_argv() -> str:
    """busybox date setting the guest's clock to the host's (UTC, the nearest second), as words
    without quoting needs (the date and time are one word: YYYY-MM-DDThh:mm:ss is refused,
    so @SECONDS)."""
    return f"{BUSYBOX} date -u -s @{round(time.time())}"


def new_mac() -> str:
    """A MAC for a new machine: QEMU's locally administered prefix 52:54:00 and three random
    bytes (os.urandom: a fork must not repeat its parent's or a sibling's)."""
    return "52:54:00:" + ":".join(f"{b:02x}" for b in os.urandom(3))


def _hostname_option(meta: dict[str, Any]) -> str:
    """The cell's hostname on the kernel's command line, which the guest's init prefers to
    its config disk's: a fork's config disk is its snapshot's copy, so a fork booted cold
    (its machine died after its resume) would otherwise take its parent's name."""
    name = meta.get("cell")
    return f" devcell.hostname={_hostname(name)}" if isinstance(name, str) else ""


def _hostname(name: str) -> str:
    return (_HOSTNAME.sub("-", name.lower()).strip("-") or "devcell")[:63]


def _quote(value: str) -> str:
    return shlex.quote(value)


def _with_options(argv: list[str], options: ExecOptions) -> list[str]:
    """`argv` behind a POSIX shell that enters `workdir` and exports `env` first (values go
    as arguments, never into the script)."""
    if not options.env and not options.workdir:
        return argv
    script = ('cd -- "$1" || exit 1; n=$2; shift 2; '
              'while [ "$n" -gt 0 ]; do export "$1"; shift; n=$((n-1)); done; exec "$@"')
    pairs = [f"{name}={value}" for name, value in options.env]
    return ["/bin/sh", "-c", script, "devcell-exec", options.workdir or ".", str(len(pairs)),
            *pairs, *argv]
