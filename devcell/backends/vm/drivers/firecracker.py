"""The Firecracker driver: a cell's machine as one `firecracker` process, driven over its API.

Written against Firecracker's published API description (tests check every request against
DevCell's transcription of it, tests/backends/vm/firecracker_contract.py), but it has NOT
run against a real Firecracker here: no Firecracker binary is in the registries this machine
reaches, and Firecracker needs KVM, which does not run guests nested
on this host. Choosing it here fails at create with a clear error (`probe`).

The process is started in the cell's owner-only directory (relative socket paths, as QEMU's
are) with `--id` set to DevCell's label (vm_proc.firecracker_id), so vm_proc proves ownership
the same way for both hypervisors; DevCell writes its pidfile. A boot configures the machine
over the API socket (vm_firecracker_api) and sends InstanceStart; a save pauses it, writes a
Full snapshot (device state beside the memory file, `<memory>.vmstate`) and ends it; a
restore starts a fresh process and loads the snapshot with the memory file mapped, resumed at
once. `snapshot` also writes Diff snapshots (only the pages dirtied since the previous one).
The guest agent is qemu-ga on vsock port AGENT_PORT, reached through Firecracker's
host-initiated vsock protocol (`CONNECT <port>` on the vsock socket, answered `OK <n>`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from devcell import safeio
from devcell.backends.host import children
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.drivers import firecracker_api as api
from devcell.backends.vm.drivers import kvm
from devcell.backends.vm.drivers import qmp as vm_qmp
from devcell.backends.vm.drivers.driver import MachineConfig, Saved
from devcell.backends.vm.drivers.qmp import Agent, JsonChannel
from devcell.errors import BackendError, BackendRefused, BackendUnavailable, CapabilityMissing
from devcell.log import logger

BINARY = "firecracker"
BINARY_ENV = "DEVCELL_FIRECRACKER"
"""An explicit path to the firecracker binary (else it is looked up on PATH)."""
AGENT_PORT = 1024
API_WAIT_SECONDS = 5.0
SNAPSHOT_SECONDS = 600.0
CONSOLE_BYTES = 65536
OUTPUT_FILE = "firecracker.out"
"""Firecracker's own stdout and stderr (before its logger is configured)."""
STATE_SUFFIX = ".vmstate"
MAX_ID = 64


def find_binary() -> str:
    given = os.environ.get(BINARY_ENV)
    found = given if given and os.access(given, os.X_OK) else shutil.which(BINARY)
    if found is None:
        raise BackendUnavailable(
            "firecracker binary not found (on PATH or in $DEVCELL_FIRECRACKER); it is not in "
            "Debian: install a release from github.com/firecracker-microvm/firecracker, or "
            "use the QEMU driver (spec.vm.driver: qemu)")
    return found


def state_file(memory: Path) -> Path:
    """Where the device state of the snapshot whose memory is `memory` lives."""
    return memory.with_name(memory.name + STATE_SUFFIX)


class FirecrackerDriver:
    name = "firecracker"
    nic = False
    """A Firecracker NIC needs a host tap device: a network, which cells do not get."""

    def __init__(self, *, binary: str | None = None,
                 kvm_probe: Callable[[Path, Path], str] | None = None) -> None:
        self._binary = binary
        self._kvm_probe = kvm_probe

    def binary(self) -> str:
        return self._binary or find_binary()

    def preflight(self) -> None:
        """What can be known without booting: the binary is there and /dev/kvm opens."""
        self.binary()
        if not kvm.device_usable():
            raise CapabilityMissing("Firecracker needs KVM: /dev/kvm cannot be opened here; "
                                    "use the QEMU driver (spec.vm.driver: qemu)")

    def probe(self, kernel: Path, initrd: Path) -> str:
        """"kvm", or a clear error: Firecracker has no emulator to fall back on."""
        self.preflight()
        accel = self._kvm_probe(kernel, initrd) if self._kvm_probe else "kvm"
        if accel != "kvm":
            raise CapabilityMissing("Firecracker needs KVM: guests do not run under KVM on "
                                    "this host (nested KVM hangs); use the QEMU driver "
                                    "(spec.vm.driver: qemu), which falls back to TCG")
        return accel

    # -- the process ------------------------------------------------------------------------

    def _launch(self, config: MachineConfig) -> int:
        machine_id = vm_proc.firecracker_id(config.name)
        if (len(machine_id) > MAX_ID
                or vm_proc.label_of_firecracker_id(machine_id) != config.name):
            raise BackendRefused(f"machine label {config.name!r} cannot be a Firecracker id")
        binary = self.binary()
        directory = config.directory
        for stale in (api.API_SOCKET, api.VSOCK_SOCKET, vm_proc.PIDFILE):
            (directory / stale).unlink(missing_ok=True)
        for name in (api.CONSOLE_FILE, api.LOG_FILE, api.METRICS_FILE):
            _fresh_file(directory / name)  # Firecracker opens these, it does not create them
        output = _fresh_file(directory / OUTPUT_FILE)
        try:
            # argv[0] is "firecracker" whatever the file is called (releases ship
            # firecracker-v1.x.y-x86_64): vm_proc knows a Firecracker by it.
            process = children.spawn_machine(
                [BINARY, "--api-sock", api.API_SOCKET, "--id", machine_id], executable=binary,
                cwd=directory, output=output)  # outlives the command that started it
        finally:
            os.close(output)
        threading.Thread(target=process.wait, daemon=True).start()  # no zombie left behind
        pidfile = _fresh_file(directory / vm_proc.PIDFILE)
        with os.fdopen(pidfile, "w") as f:
            f.write(f"{process.pid}\n")
        self._wait_for_api(config, process)
        logger.bind(machine=config.name, pid=process.pid).debug("firecracker started")
        return process.pid

    def _wait_for_api(self, config: MachineConfig, process: children.Machine) -> None:
        deadline = time.monotonic() + API_WAIT_SECONDS
        while True:
            if process.poll() is not None:
                raise BackendError(f"firecracker exited ({process.returncode}) before its "
                                   f"API answered: {self._output_tail(config)}")
            try:
                with api.FirecrackerApi(config.directory, timeout=1.0) as client:
                    client.state()
                return
            except BackendUnavailable:
                if time.monotonic() > deadline:
                    vm_proc.kill(process.pid, config.name)
                    raise BackendError(f"firecracker's API did not answer within "
                                       f"{API_WAIT_SECONDS:g} s") from None
                time.sleep(0.01)

    def _output_tail(self, config: MachineConfig) -> str:
        text = _tail(config.directory, OUTPUT_FILE, 2048).decode("utf-8", "replace")
        return repr(" ".join(text.strip().splitlines()[-3:])[-300:])[1:-1] or "no output"

    def _started(self, config: MachineConfig, then: Callable[[api.FirecrackerApi], None]
                 ) -> int:
        """Launch, then `then` over the API; the process is ended if that fails."""
        pid = self._launch(config)
        try:
            with api.FirecrackerApi(config.directory) as client:
                then(client)
        except BaseException:
            vm_proc.kill(pid, config.name)
            raise
        return pid

    # -- the boundary -----------------------------------------------------------------------

    def boot(self, config: MachineConfig) -> int:
        def configure_and_start(client: api.FirecrackerApi) -> None:
            client.configure(config)
            client.start()
        return self._started(config, configure_and_start)

    def restore(self, config: MachineConfig, saved: Path, *, memory_in_file: bool = False
                ) -> int:
        if memory_in_file:
            raise CapabilityMissing("Firecracker keeps guest memory in its snapshot's memory "
                                    "file, not in a shared file of the machine's")
        return self._started(config, lambda client: client.load(
            state_file(saved), saved, resume=True, timeout=SNAPSHOT_SECONDS))

    def snapshot(self, config: MachineConfig, memory: Path, kind: api.SnapshotKind, *,
                 resume: bool = True) -> Saved:
        """Pause, write a snapshot (memory to `memory`, device state beside it), resume
        unless told not to. A Diff snapshot holds only the pages dirtied since the previous
        snapshot; it is applied onto a copy of that one's memory file to be loaded."""
        began = time.monotonic()
        with api.FirecrackerApi(config.directory) as client:
            client.set_state(api.VmState.PAUSED)
            try:
                client.snapshot(state_file(memory), memory, kind, timeout=SNAPSHOT_SECONDS)
            except BaseException:
                client.set_state(api.VmState.RESUMED)
                raise
            if resume:
                client.set_state(api.VmState.RESUMED)
        size = memory.stat().st_size + state_file(memory).stat().st_size
        return Saved(memory, size, time.monotonic() - began)

    def agent_held(self, config: MachineConfig) -> AbstractContextManager[None]:
        """Nothing held: a Firecracker snapshot keeps no virtio-serial port state."""
        return contextlib.nullcontext()

    def save(self, config: MachineConfig, into: Path, *, keep: bool = False) -> Saved:
        """A Full snapshot, then the process ends (`keep`: left paused, for `unpause`)."""
        pid = vm_proc.find(config.directory, config.name)
        saved = self.snapshot(config, into, api.SnapshotKind.FULL, resume=False)
        if pid is not None and not keep:
            vm_proc.kill(pid, config.name)  # saved and paused: nothing left to lose
        return saved

    def _state(self, config: MachineConfig, timeout: float) -> str:
        try:
            with api.FirecrackerApi(config.directory, timeout=timeout) as client:
                return client.state()
        except BackendError:
            return ""

    def running(self, config: MachineConfig) -> bool:
        return self._state(config, 5.0) == "Running"

    def paused(self, config: MachineConfig) -> bool:
        return self._state(config, 2.0) == "Paused"

    def unpause(self, config: MachineConfig) -> bool:
        with api.FirecrackerApi(config.directory, timeout=5.0) as client:
            if client.state() != "Paused":
                return False
            client.set_state(api.VmState.RESUMED)
            return True

    def pause(self, config: MachineConfig) -> bool:
        raise CapabilityMissing("a machine snapshot with a Firecracker driver is not "
                                "supported: it pauses the machine to switch its workspace "
                                "disk to a new layer, and Firecracker's raw disks have no "
                                "layers (use a QEMU machine, or a snapshot without memory)")

    def shutdown(self, config: MachineConfig, pid: int, *, timeout: float) -> None:
        """Ctrl-Alt-Del (the guest reboots, and Firecracker exits on a guest reboot), then
        SIGKILL after `timeout`."""
        try:
            with api.FirecrackerApi(config.directory, timeout=min(timeout, 5.0)) as client:
                client.ctrl_alt_del()
        except BackendError:
            pass
        if not vm_proc.wait_gone(pid, config.name, timeout):
            vm_proc.kill(pid, config.name)

    def snapshot_disk(self, config: MachineConfig, disk: int, overlay: Path) -> None:
        raise CapabilityMissing("Firecracker has no block-layer snapshots (its disks are raw "
                                "files); a disk snapshot of its machine is a Diff snapshot "
                                "plus a copy of the paused machine's disk file")

    def flatten_disk(self, config: MachineConfig, disk: int) -> None:
        raise CapabilityMissing("Firecracker's disks are raw files: there is no chain to "
                                "flatten")

    def console(self, config: MachineConfig) -> bytes:
        """The last 64 KiB the guest wrote to its serial console (its file, read bounded)."""
        return _tail(config.directory, api.CONSOLE_FILE, CONSOLE_BYTES)

    def agent(self, config: MachineConfig, *, timeout: float,
              alive: Callable[[], bool] | None = None) -> Agent:
        return VsockAgent(config.directory, port=AGENT_PORT, timeout=timeout, alive=alive)


class VsockAgent(Agent):
    """qemu-ga over Firecracker's vsock: the same protocol as over virtio-serial once the
    connection is forwarded to the guest's port."""

    def __init__(self, directory: Path, *, port: int, timeout: float,
                 alive: Callable[[], bool] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                sock, early = _vsock_connect(directory, port, min(2.0, max(timeout, 0.1)))
                break
            except (OSError, BackendError) as exc:
                if time.monotonic() > deadline:
                    raise BackendUnavailable(f"cannot reach the guest agent on vsock port "
                                             f"{port}: {exc}") from None
                vm_qmp.gone_unless(alive)
                time.sleep(0.1)
        self.session = os.urandom(4).hex()
        self.channel = JsonChannel(sock, "the guest agent")
        self.channel.buffer = bytearray(early)
        self._sync(deadline)


def _vsock_connect(directory: Path, port: int, timeout: float) -> tuple[socket.socket, bytes]:
    """A stream to the guest's `port`, and whatever the guest sent right after the answer."""
    sock = vm_qmp.connect(directory, api.VSOCK_SOCKET, timeout=timeout)
    try:
        sock.sendall(f"CONNECT {port}\n".encode())
        channel = JsonChannel(sock, "Firecracker's vsock")
        answer = channel.read_line(time.monotonic() + timeout)
        if not answer.startswith(b"OK "):
            raise BackendError(f"vsock port {port} refused the connection")
        return sock, bytes(channel.buffer)
    except BaseException:
        sock.close()
        raise


def _fresh_file(path: Path) -> int:
    """An empty owner-only file at `path` (never through a link); its write descriptor."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                   0o600)


def _tail(directory: Path, name: str, limit: int) -> bytes:
    try:
        fd = safeio.open_regular(directory, name)
    except (FileNotFoundError, NotADirectoryError, safeio.UnsafeFile):
        return b""
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - limit), os.SEEK_SET)
        return safeio.read_some(fd, limit)
    finally:
        os.close(fd)
