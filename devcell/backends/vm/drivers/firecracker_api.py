"""Firecracker's HTTP API, as DevCell uses it: the request bodies and one client.

The bodies are pure functions of a MachineConfig, so tests check each against DevCell's
transcription of Firecracker's published API description
(tests/backends/vm/firecracker_contract.py) without a hypervisor. The client maps
Firecracker's answers onto DevCell's errors at this one place, by status: 204/200 are success,
400 is Firecracker refusing the request as asked (BackendRefused, with its `fault_message`),
anything else a failure worth retrying (BackendError). Callers never search the text.

What a cell's machine gets: vCPUs and memory with dirty-page tracking (so Diff snapshots are
possible), the kernel, initrd and command line, one drive per disk in the guest's order
(vda, vdb, ...), no network interface (cells have no network), a vsock device for the guest
agent, the serial console into a file at a bounded rate, and a logger and metrics file.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from devcell.backends.vm.drivers.driver import Disk, MachineConfig
from devcell.backends.vm.drivers.http_unix import Reply, UnixHttp
from devcell.errors import BackendError, BackendRefused

API_SOCKET = "api.sock"
VSOCK_SOCKET = "vsock.sock"
CONSOLE_FILE = "console.log"
LOG_FILE = "firecracker.log"
METRICS_FILE = "metrics.json"
GUEST_CID = 3
"""The guest's vsock address; each machine has its own vsock device, so all use 3."""
CONSOLE_RATE = {"size": 4096, "refill_time": 1000, "one_time_burst": 262144}
"""The guest writes the host's disk through its console: 256 KiB at first (a boot's messages),
then at most 4 KiB a second (Firecracker drops the rest), so a guest printing without end
adds at most ~350 MB a day; the file is emptied at every start of the machine."""
FAULT_CHARS = 300


class SnapshotKind(StrEnum):
    FULL = "Full"
    DIFF = "Diff"
    """Only the memory dirtied since the previous snapshot (needs track_dirty_pages)."""


class VmState(StrEnum):
    PAUSED = "Paused"
    RESUMED = "Resumed"


# -- request bodies --------------------------------------------------------------------------

def machine_config(config: MachineConfig) -> dict[str, Any]:
    return {"vcpu_count": config.cpus, "mem_size_mib": config.memory_mib, "smt": False,
            "track_dirty_pages": True}


def boot_source(config: MachineConfig) -> dict[str, Any]:
    return {"kernel_image_path": str(config.kernel), "initrd_path": str(config.initrd),
            "boot_args": config.cmdline}


def drive_id(index: int) -> str:
    """The name the guest gives the disk (vda, vdb, ...): Firecracker attaches in that order."""
    return "vd" + chr(ord("a") + index)


def drive(index: int, disk: Disk) -> dict[str, Any]:
    if disk.format != "raw":
        raise BackendRefused(f"Firecracker reads raw disks only; {disk.path.name} is "
                             f"{disk.format}")
    return {"drive_id": drive_id(index), "path_on_host": str(disk.path),
            "is_root_device": False, "is_read_only": disk.read_only,
            "cache_type": "Writeback", "io_engine": "Sync"}


def vsock() -> dict[str, Any]:
    return {"guest_cid": GUEST_CID, "uds_path": VSOCK_SOCKET}


def serial() -> dict[str, Any]:
    return {"serial_out_path": CONSOLE_FILE, "rate_limiter": dict(CONSOLE_RATE)}


def logger_config() -> dict[str, Any]:
    return {"log_path": LOG_FILE, "level": "Warning", "show_level": True,
            "show_log_origin": False}


def metrics() -> dict[str, Any]:
    return {"metrics_path": METRICS_FILE}


def snapshot_create(state: Path, memory: Path, kind: SnapshotKind) -> dict[str, Any]:
    return {"snapshot_path": str(state), "mem_file_path": str(memory),
            "snapshot_type": kind.value}


def snapshot_load(state: Path, memory: Path, *, resume: bool) -> dict[str, Any]:
    """Memory mapped from the file (mem_backend File: pages are read as the guest touches
    them), the machine resumed at once when `resume`, dirty pages tracked for Diff."""
    return {"snapshot_path": str(state),
            "mem_backend": {"backend_type": "File", "backend_path": str(memory)},
            "resume_vm": resume, "track_dirty_pages": True}


# -- the client ------------------------------------------------------------------------------

class FirecrackerApi:
    """One Firecracker process's API socket (in the cell's directory)."""

    def __init__(self, directory: Path, *, timeout: float = 10.0) -> None:
        self.http = UnixHttp(directory, API_SOCKET, what="Firecracker's API", timeout=timeout)

    def __enter__(self) -> FirecrackerApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, *,
             timeout: float | None = None) -> dict[str, Any] | None:
        reply = self.http.request(method, path, body, timeout=timeout)
        if reply.status in (200, 204):
            return reply.json()
        raise _error(method, path, reply)

    def configure(self, config: MachineConfig) -> None:
        """Everything before InstanceStart, in the order Firecracker's guide gives."""
        self.call("PUT", "/logger", logger_config())
        self.call("PUT", "/metrics", metrics())
        self.call("PUT", "/machine-config", machine_config(config))
        self.call("PUT", "/boot-source", boot_source(config))
        for index, disk in enumerate(config.disks):
            self.call("PUT", f"/drives/{drive_id(index)}", drive(index, disk))
        self.call("PUT", "/vsock", vsock())
        self.call("PUT", "/serial", serial())

    def start(self) -> None:
        self.call("PUT", "/actions", {"action_type": "InstanceStart"})

    def set_state(self, state: VmState) -> None:
        self.call("PATCH", "/vm", {"state": state.value})

    def state(self) -> str:
        """"Not started", "Running" or "Paused" (GET /, InstanceInfo.state)."""
        info = self.call("GET", "/") or {}
        return str(info.get("state", ""))

    def snapshot(self, state: Path, memory: Path, kind: SnapshotKind, *,
                 timeout: float) -> None:
        self.call("PUT", "/snapshot/create", snapshot_create(state, memory, kind),
                  timeout=timeout)

    def load(self, state: Path, memory: Path, *, resume: bool, timeout: float) -> None:
        """Only on a fresh process: logger and metrics may precede it, nothing else."""
        self.call("PUT", "/logger", logger_config())
        self.call("PUT", "/metrics", metrics())
        self.call("PUT", "/snapshot/load", snapshot_load(state, memory, resume=resume),
                  timeout=timeout)

    def ctrl_alt_del(self) -> None:
        self.call("PUT", "/actions", {"action_type": "SendCtrlAltDel"})


def _error(method: str, path: str, reply: Reply) -> BackendError:
    fault = str((reply.json() or {}).get("fault_message") or "no fault_message")
    fault = repr(fault[:FAULT_CHARS])[1:-1]  # escaped: printed as is by the CLI
    message = f"Firecracker refused {method} {path} (HTTP {reply.status}): {fault}"
    if reply.status == 400:
        return BackendRefused(message)
    return BackendError(message)
