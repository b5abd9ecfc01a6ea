"""The QEMU microvm driver: a cell's machine as one daemonized qemu-system-x86_64 process.

microvm is QEMU's minimal machine (virtio-mmio devices, no PCI, no firmware: the kernel is
loaded directly), the closest QEMU has to Firecracker. The process daemonizes (-daemonize), so
a machine outlives the DevCell command that started it, and writes its pidfile; its -name is
DevCell's ownership label (vm/proc.py). It is started with its working directory in the cell's
owner-only directory and relative socket paths, so a deep state directory never exceeds a unix
socket path's 108 bytes. The serial console is a 64 KiB ring buffer inside QEMU (bounded
whatever the guest prints), read through QMP (`console`).

Guest RAM is a file (`memory-backend-file`, `share=on`): the RAM *is* the file, so a memory
snapshot is QMP `stop`, `migrate` of the device state only (capability `x-ignore-shared`) to
`exec:cat > FILE`, a flush of the RAM file, `quit`; a restore starts a new QEMU mapping the
same file with `-incoming defer`, sets the same capability and `migrate-incoming` from the
small device-state file, so the guest's pages are read when it touches them (demand-paged),
not all before it runs. The guest agent's port is a pair of FIFOs QEMU holds open (vm/drivers/qmp.py),
so a resumed guest's qemu-ga never lost its host and answers the first client at once.
(Machines started before that have a socket there until they next start: a save holds a
client on it through the migration, for the same reason.)
A fork maps a snapshot's RAM file with `share=off`: its pages are
copy-on-write, shared in the host's page cache by every fork of that snapshot. A machine
whose RAM is private (a fork) is saved whole into the file, as before.

What a machine costs the host beyond its guest's RAM is kept small, because forks of one
machine snapshot share their RAM and what is left is each QEMU process's own (measured with
bench/vm.py, docs/backends.md "10 forks of one machine snapshot"). Under TCG a fork on its
snapshot's RAM has a translation buffer of TB_MIB, not QEMU's 1 GiB, which an idle guest
fills by tens of MiB (others keep QEMU's: a small buffer is flushed over and over, which
slows a boot by half and a resume by a fifth). A resumed machine is started without -kernel and
-initrd: QEMU keeps a copy of the kernel in its memory for the machine's life (14 MiB), read
only by a boot, which a resumed machine never does (-no-reboot ends it at a guest reboot).
glibc keeps one malloc arena in QEMU (QEMU_ENV) instead of one per thread.

KVM is used when /dev/kvm works: a short probe boots the kernel once under
KVM and expects a line back within seconds (nested KVM can hang); otherwise TCG.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from devcell import failpoints
from devcell.backends.host import children
from devcell.backends.vm import guest as vm_guest
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.drivers import accel as accel_finding
from devcell.backends.vm.drivers import kvm
from devcell.backends.vm.drivers.driver import Forward, MachineConfig, Saved
from devcell.backends.vm.drivers.qmp import (
    AGENT_PIPE,
    Agent,
    Qmp,
    has_agent_pipes,
    make_agent_pipes,
)
from devcell.errors import BackendError, BackendRefused, BackendUnavailable
from devcell.log import logger

QEMU = "qemu-system-x86_64"
CONSOLE_BYTES = 65536
PROBE_MARK = "DEVCELL-PROBE-OK"
PROBE_SECONDS = 4.0
SAVE_SECONDS = 600.0
IGNORE_SHARED = "x-ignore-shared"
HOLD_SECONDS = 1.0
"""How long a save waits for the guest agent's answer on the connection it holds open
through the save (`_hold_agent`) before saving without it."""
TB_MIB = 16
"""The TCG translation buffer in MiB (tb-size) of a fork resumed on its snapshot's RAM, the
case of many copies of one machine; DEVCELL_VM_TCG_TB_MIB, when set, is every machine's, 0
meaning QEMU's 1 GiB. Touched as code is translated and never given back, so it is host
memory every machine keeps; when full, QEMU drops all translations and starts again. Its cost
(bench/vm_tb.py): a resume 0.72 s instead of 0.60, a boot 8.8 s instead of 5.8 s, so other
machines keep QEMU's."""
NETDEV = "net0"
QEMU_ENV = {"MALLOC_ARENA_MAX": "1"}
"""glibc's malloc in QEMU: one arena, not one per thread (each a heap of its own, partly
touched): a few MiB per machine (bench/vm.py)."""


def _opt(path: Path | str) -> str:
    """A path inside a QEMU option (a comma is written twice there)."""
    return str(path).replace(",", ",,")


def qemu_binary() -> str:
    found = shutil.which(QEMU)
    if found is None:
        raise BackendUnavailable(f"{QEMU} is not installed; install Debian's QEMU: apt-get "
                                 "install -y qemu-system-x86 qemu-utils")
    return found


class QemuDriver:
    name = "qemu-microvm"
    nic = True

    def __init__(self, *, accel_cache: Path | None = None) -> None:
        self.accel_cache = accel_cache

    # -- acceleration -----------------------------------------------------------------------

    def accel(self) -> str:
        """What is known without booting: forced, no usable /dev/kvm, or this boot's probe."""
        forced = os.environ.get("DEVCELL_VM_ACCEL")
        if forced in ("kvm", "tcg"):
            return forced
        if not kvm.device_usable():
            return "tcg"
        return self._cached() or "tcg"

    def _cached(self) -> str | None:
        found = accel_finding.read(self.accel_cache)
        return None if found is None else found.accel

    def probe(self, kernel: Path, initrd: Path) -> str:
        """Boot the kernel once under KVM; "kvm" when its initrd answers in time, else "tcg".
        Once per host boot (cached): nested KVM that hangs costs PROBE_SECONDS once."""
        if os.environ.get("DEVCELL_VM_ACCEL") in ("kvm", "tcg") or not kvm.device_usable():
            return self.accel()
        cached = self._cached()
        if cached is not None:
            return cached
        argv = [qemu_binary(), "-M", "microvm,isa-serial=on,rtc=on,pit=on,pic=on",
                "-accel", "kvm", "-cpu", "host", "-m", "128", "-nodefaults", "-no-user-config",
                "-display", "none", "-serial", "stdio", "-no-reboot",
                "-kernel", str(kernel), "-initrd", str(initrd),
                "-append", "console=ttyS0 quiet panic=-1 devcell.probe=1"]
        found = _probed(argv)
        logger.bind(accel=found.accel, reason=found.reason).info("probed KVM")
        if self.accel_cache is not None:
            accel_finding.write(self.accel_cache, found)
        assert found.accel is not None
        return found.accel

    # -- machines ---------------------------------------------------------------------------

    def argv(self, config: MachineConfig, *, boots: bool = True) -> list[str]:
        """QEMU's command line; `boots` False for a machine resumed from saved state, which
        needs no kernel (see the module's doc)."""
        accel = config.accel
        machine = "microvm,isa-serial=on,rtc=on,pit=on,pic=on"
        memory: list[str] = []
        if config.memory_file is not None:
            machine += ",memory-backend=mem"
            share = "on" if config.memory_shared else "off"
            memory = ["-object", f"memory-backend-file,id=mem,size={config.memory_mib}M,"
                      f"mem-path={_opt(config.memory_file)},share={share}"]
        kernel = ["-kernel", _opt(config.kernel), "-initrd", _opt(config.initrd),
                  "-append", config.cmdline + (_tcg_clock() if accel == "tcg" else "")]
        argv = [qemu_binary(), "-name", config.name, "-M", machine, *memory,
                "-accel", accel + (_tcg_options(fork=not boots and not config.memory_shared)
                                   if accel == "tcg" else ""),
                *(["-cpu", "host"] if accel == "kvm" else []),
                "-m", str(config.memory_mib), "-smp", str(config.cpus),
                "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
                *(kernel if boots else []),
                "-chardev", f"ringbuf,id=con,size={CONSOLE_BYTES}", "-serial", "chardev:con",
                "-chardev", "socket,id=mon,path=qmp.sock,server=on,wait=off",
                "-mon", "chardev=mon,mode=control",
                "-device", "virtio-serial-device",
                "-chardev", f"pipe,id=ga,path={AGENT_PIPE}",
                "-device", "virtserialport,chardev=ga,name=org.qemu.guest_agent.0",
                *_stream_ports(config.streams),
                "-pidfile", vm_proc.PIDFILE, "-daemonize"]
        for n, disk in enumerate(config.disks):
            readonly = ",readonly=on" if disk.read_only else ""
            argv += ["-drive", f"id=d{n},file={_opt(disk.path)},format={disk.format},if=none,"
                     f"cache=writeback,discard=unmap{readonly}",
                     "-device", f"virtio-blk-device,drive=d{n}"]
        if config.mac is not None:
            # Last, so the devices before it keep their places (a saved machine's state names
            # them in order). No netdev unless the cell publishes ports: the NIC is connected
            # to nothing. No guest announce:
            # after a resume QEMU would have the guest announce itself (for switches to learn
            # where a migrated NIC went; this one has no peer), interrupting it while it is
            # slowest under TCG. (Not `announce-rounds` 0 on the migration: with it a guest
            # resetting its NIC after a resume crashed QEMU, a NULL announce timer.)
            nic = f"virtio-net-device,mac={config.mac},guest_announce=off"
            if config.network:
                argv += ["-netdev", user_network(config.forwards)]
                nic += f",netdev={NETDEV}"
            argv += ["-device", nic]
        return argv

    def _launch(self, config: MachineConfig, *, incoming: bool) -> int:
        for stale in ("qmp.sock", "ga.sock", vm_proc.PIDFILE,
                      *(f"streams{n}.sock" for n in range(config.streams))):
            (config.directory / stale).unlink(missing_ok=True)
        make_agent_pipes(config.directory)
        argv = self.argv(config, boots=not incoming)
        if incoming:
            argv += ["-incoming", "defer"]
        try:
            done = children.run_bytes(argv, cwd=config.directory, timeout=60, env=QEMU_ENV)
        except children.TimeoutExpired:
            raise BackendError(f"{QEMU} did not start within 60 s") from None
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace")
            taken = _forward_taken(said, config.forwards)
            if taken is not None:
                # Retrying cannot help while another program holds it: the cell fails with
                # the reason (as a container's "port is already allocated").
                raise BackendRefused(f"host port {taken.host_ip}:{taken.host_port} (published "
                                     f"from port {taken.guest_port}) is held by another program "
                                     "or cell: free it, or publish this cell on another hostPort")
            tail = " ".join(said.strip().splitlines()[-3:])
            raise BackendError(f"{QEMU} failed to start machine {config.name}: {tail}")
        pid = vm_proc.read_pidfile(config.directory)
        if pid is None or not vm_proc.is_owned(pid, config.name):
            raise BackendError(f"{QEMU} started but machine {config.name} is not running")
        logger.bind(machine=config.name, pid=pid).debug("qemu started")
        return pid

    def boot(self, config: MachineConfig) -> int:
        _fresh_memory(config)
        return self._launch(config, incoming=False)

    def restore(self, config: MachineConfig, saved: Path, *, memory_in_file: bool) -> int:
        if not memory_in_file:
            _fresh_memory(config)  # the pages come in the saved stream
        elif config.memory_file is None or not config.memory_file.is_file():
            raise BackendError(f"machine {config.name} cannot resume: its memory file is gone")
        pid = self._launch(config, incoming=True)
        try:
            self._load(config, saved, memory_in_file=memory_in_file)
        except BaseException:
            # A QEMU left waiting for (or stuck in) its state would pass for a running
            # machine: a later start would keep it instead of booting (api/wake.py's fallback).
            vm_proc.kill(pid, config.name)
            raise
        return pid

    @staticmethod
    def _load(config: MachineConfig, saved: Path, *, memory_in_file: bool) -> None:
        """Device state into the waiting QEMU (migrate-incoming), until the guest runs."""
        deadline = time.monotonic() + SAVE_SECONDS
        with Qmp(config.directory) as qmp:
            if memory_in_file:
                _set_ignore_shared(qmp, True, config.name)
            qmp.command("migrate-incoming", uri=f"exec:cat {shlex.quote(str(saved))}")
            while True:
                status = qmp.command("query-status")
                if status.get("running"):
                    return
                if status.get("status") not in ("inmigrate", "prelaunch", "paused",
                                                "postmigrate", "finish-migrate"):
                    raise BackendError(f"machine {config.name} did not resume: QEMU says "
                                       f"{status.get('status')!r}")
                if status.get("status") == "paused":
                    qmp.command("cont")
                if time.monotonic() > deadline:
                    raise BackendError(f"machine {config.name} did not resume in time")
                time.sleep(0.01)

    @staticmethod
    def _hold_agent(config: MachineConfig) -> Agent | None:
        """A synced connection to the guest agent, kept open while the machine is saved, so
        the saved guest has a client on its port and qemu-ga is not left polling an empty
        one (a machine started before the agent's FIFOs: its wake gets them). Best effort: a
        guest whose agent does not answer within HOLD_SECONDS (hung, or another client on the
        port) is saved without it, and its wake reaches the agent the slower way. None at
        once for a machine whose agent is on FIFOs: nothing to hold, QEMU holds them."""
        if has_agent_pipes(config.directory):
            return None
        try:
            return Agent(config.directory, timeout=HOLD_SECONDS)
        except (BackendError, OSError) as exc:
            logger.bind(machine=config.name).debug("saved without an agent client: {}", exc)
            return None

    @contextlib.contextmanager
    def agent_held(self, config: MachineConfig) -> Iterator[None]:
        held = self._hold_agent(config)
        try:
            yield
        finally:
            if held is not None:
                held.channel.close()

    def save(self, config: MachineConfig, into: Path, *, keep: bool = False) -> Saved:
        """A sleep (not `keep`) holds the agent's port until QEMU has quit; a machine snapshot
        (`keep`) is saved inside its caller's `agent_held`."""
        began = time.monotonic()
        pid = vm_proc.find(config.directory, config.name)
        with contextlib.nullcontext() if keep else self.agent_held(config):
            return self._save(config, into, keep=keep, began=began, pid=pid)

    def _save(self, config: MachineConfig, into: Path, *, keep: bool, began: float,
              pid: int | None) -> Saved:
        shared = config.memory_file is not None and config.memory_shared
        with Qmp(config.directory) as qmp:
            qmp.command("stop")
            in_file = shared and _set_ignore_shared(qmp, True, None)
            if not shared:
                _set_ignore_shared(qmp, False, None)
            qmp.command("migrate", uri=f"exec:cat > {shlex.quote(str(into))}")
            deadline = time.monotonic() + SAVE_SECONDS
            while True:
                state = qmp.command("query-migrate").get("status")
                if state == "completed":
                    break
                if state in ("failed", "cancelled") or time.monotonic() > deadline:
                    qmp.command("cont")
                    raise BackendError(f"saving machine {config.name} failed ({state})")
                time.sleep(0.01)
            failpoints.hit("vm.save.after-migrate")
            if not keep:
                qmp.command("quit")
        if not keep and pid is not None and not vm_proc.wait_gone(pid, config.name, 10.0):
            vm_proc.kill(pid, config.name)
        size = into.stat().st_size
        if in_file and config.memory_file is not None:
            _flush(config.memory_file)  # the RAM file is the saved memory: on disk before done
            size += allocated(config.memory_file)
        return Saved(into, size, time.monotonic() - began, memory_in_file=in_file)

    def running(self, config: MachineConfig) -> bool:
        try:
            with Qmp(config.directory, timeout=5.0) as qmp:
                return bool(qmp.command("query-status").get("running"))
        except (BackendError, OSError, TimeoutError):
            return False

    def paused(self, config: MachineConfig) -> bool:
        try:
            with Qmp(config.directory, timeout=2.0) as qmp:
                status = qmp.command("query-status")
        except (BackendError, OSError, TimeoutError):
            return False  # busy (one monitor client at a time) or gone: not known paused
        return not status.get("running") and status.get("status") in ("paused", "postmigrate")

    def pause(self, config: MachineConfig) -> bool:
        """QMP `stop`: the vCPUs stop, block devices stay active (unlike after `migrate`)."""
        with Qmp(config.directory, timeout=5.0) as qmp:
            if not qmp.command("query-status").get("running"):
                return False
            qmp.command("stop")
            return True

    def unpause(self, config: MachineConfig) -> bool:
        with Qmp(config.directory, timeout=5.0) as qmp:
            if qmp.command("query-status").get("running"):
                return False
            qmp.command("cont")
            return True

    def shutdown(self, config: MachineConfig, pid: int, *, timeout: float) -> None:
        try:
            with Qmp(config.directory, timeout=min(timeout, 5.0)) as qmp:
                qmp.command("quit")
        except (BackendError, OSError, TimeoutError):
            pass
        if not vm_proc.wait_gone(pid, config.name, timeout):
            vm_proc.kill(pid, config.name)

    def agent(self, config: MachineConfig, *, timeout: float,
              alive: Callable[[], bool] | None = None) -> Agent:
        return Agent(config.directory, timeout=timeout, alive=alive)

    def console(self, config: MachineConfig) -> bytes:
        """What the guest printed on its serial console lately (at most 64 KiB)."""
        try:
            with Qmp(config.directory, timeout=5.0) as qmp:
                data = qmp.command("ringbuf-read", device="con", size=CONSOLE_BYTES,
                                   format="base64")
        except (BackendError, OSError, TimeoutError):
            return b""
        return base64.b64decode(data or "")[:CONSOLE_BYTES]

    # -- disks -----------------------------------------------------------------------------

    def snapshot_disk(self, config: MachineConfig, disk: int, overlay: Path) -> None:
        """QMP `blockdev-snapshot-sync`: QEMU drains and flushes the disk, makes `overlay`
        (backed by the old file, its format recorded) and switches the machine to it."""
        with Qmp(config.directory, timeout=60.0) as qmp:
            arguments = {"device": f"d{disk}", "snapshot-file": str(overlay),
                         "format": "qcow2", "mode": "absolute-paths"}
            qmp.command("blockdev-snapshot-sync", None, **arguments)
        os.chmod(overlay, 0o600)

    def flatten_disk(self, config: MachineConfig, disk: int) -> None:
        """QMP `block-stream` of the whole chain into the disk's top, waited for; checked
        afterwards (the job's error comes only as an event) by the top having no backing."""
        device = f"d{disk}"
        with Qmp(config.directory, timeout=60.0) as qmp:
            qmp.command("block-stream", None, **{"device": device,
                                                 "job-id": f"flatten-{device}"})
            deadline = time.monotonic() + SAVE_SECONDS
            while any(job.get("device") == f"flatten-{device}" or job.get("device") == device
                      for job in qmp.command("query-block-jobs") or []):
                if time.monotonic() > deadline:
                    raise BackendError(f"flattening disk {device} of {config.name} did not "
                                       "finish in time")
                time.sleep(0.05)
            for block in qmp.command("query-block") or []:
                if block.get("device") == device and \
                        (block.get("inserted") or {}).get("backing_file"):
                    raise BackendError(f"flattening disk {device} of {config.name} failed")


def user_network(forwards: tuple[Forward, ...]) -> str:
    """`-netdev`'s value for a machine that publishes ports: QEMU's user networking (slirp,
    in the QEMU process: no device on the host, no privilege), `restrict=on` so the guest
    reaches nothing outside (not the host, not its loopback, no DNS) while each `hostfwd`
    still takes connections to a host address and port into the guest's address (vm/guest.py),
    `ipv6=off` (nothing is published over it)."""
    rules = "".join(f",hostfwd=tcp:{f.host_ip}:{f.host_port}-{vm_guest.GUEST_ADDRESS}:{f.guest_port}"
                    for f in forwards)
    return f"user,id={NETDEV},restrict=on,ipv6=off{rules}"


def _forward_taken(said: str, forwards: tuple[Forward, ...]) -> Forward | None:
    """The forward QEMU's start failed on ("Could not set up host forwarding rule 'tcp:
    ADDRESS:PORT-...'": its host port is bound already), or None."""
    for forward in forwards:
        if (f"Could not set up host forwarding rule 'tcp:{forward.host_ip}:{forward.host_port}-"
                in said):
            return forward
    return None


def _stream_ports(count: int) -> list[str]:
    """The stream helper's ports (vm/streams.py): each a unix socket QEMU listens on in the
    cell's directory, one client at a time, carrying nothing until the guest's helper opens
    its end. After the agent's port, so a machine's other devices keep their places."""
    argv: list[str] = []
    for n in range(count):
        argv += ["-chardev", f"socket,id=st{n},path=streams{n}.sock,server=on,wait=off",
                 "-device", f"virtserialport,chardev=st{n},name=dev.devcell.streams.{n}"]
    return argv


def allocated(path: Path) -> int:
    """Bytes a (sparse) file holds on disk."""
    try:
        return os.stat(path, follow_symlinks=False).st_blocks * 512
    except OSError:
        return 0


def _fresh_memory(config: MachineConfig) -> None:
    """An empty, owner-only RAM file for a machine whose RAM is its own (QEMU would create it
    world-readable, and a stale one would keep the last run's pages allocated)."""
    if config.memory_file is None or not config.memory_shared:
        return
    config.memory_file.unlink(missing_ok=True)
    fd = os.open(config.memory_file, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    os.close(fd)


def _flush(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _set_ignore_shared(qmp: Qmp, on: bool, required_by: str | None) -> bool:
    """Set `x-ignore-shared` (migrate shared RAM by reference, not by copy) when this QEMU has
    it (7.2 does); whether it is now on. `required_by` names a machine that cannot resume
    without it."""
    known = {c.get("capability") for c in qmp.command("query-migrate-capabilities") or []}
    if IGNORE_SHARED not in known:
        if on and required_by is not None:
            raise BackendUnavailable(f"this QEMU cannot map saved memory (no {IGNORE_SHARED} "
                                     f"migration capability): machine {required_by}")
        return False
    qmp.command("migrate-set-capabilities",
                capabilities=[{"capability": IGNORE_SHARED, "state": on}])
    return on


def _tcg_options(*, fork: bool) -> str:
    """`-accel tcg`'s options: the translation buffer's size, TB_MIB for a fork resumed on its
    snapshot's RAM and QEMU's own otherwise, or DEVCELL_VM_TCG_TB_MIB's for every machine when
    set (0: QEMU's own)."""
    try:
        mib = int(os.environ["DEVCELL_VM_TCG_TB_MIB"])
    except (KeyError, ValueError):
        mib = TB_MIB if fork else 0
    return f",tb-size={mib}" if mib > 0 else ""


def _tcg_clock() -> str:
    """The guest's TSC frequency, given rather than measured: under TCG on a busy host the
    kernel's calibration against the PIT fails, and with no other clock the boot hangs."""
    khz = 2_000_000
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                khz = int(float(line.split(":")[1]) * 1000)
                break
    except (OSError, ValueError, IndexError):
        pass
    return f" tsc_early_khz={khz}"


def _probed(argv: list[str]) -> accel_finding.Finding:
    """The probe's boot under KVM (`argv`): kvm when its initrd answers in time, else tcg;
    with the reason, which `devcell version` shows."""
    began = time.monotonic()
    try:
        done = children.run_bytes(argv, timeout=PROBE_SECONDS)
    except children.TimeoutExpired:  # nested KVM that hangs: the machine runs under TCG
        hint = accel_finding.cpu_hint()
        return accel_finding.Finding("tcg", f"a guest under KVM gave no answer in "
                                            f"{PROBE_SECONDS:g}s (nested KVM that hangs"
                                            + (f"; {hint})" if hint else ")"))
    if PROBE_MARK.encode() in done.stdout:
        return accel_finding.Finding("kvm", f"a guest booted under KVM answered in "
                                            f"{time.monotonic() - began:.1f}s")
    said = [line for line in done.stderr.decode(errors="replace").splitlines()
            if line.strip() and "warning:" not in line]
    last = f": {said[-1].strip()[:200]}" if said else ""
    return accel_finding.Finding("tcg", f"a guest under KVM stopped without answering (QEMU "
                                        f"exit status {done.returncode}{last})")
