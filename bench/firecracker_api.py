"""Firecracker driver: what DevCell's side of a boot and a restore costs over the API socket.

Firecracker has not run on this host (no binary, no working KVM), so this does not time a
Firecracker. It times the driver's requests against the stand-in that tests use
(tests/backends/vm/firecracker_fake.py, a separate Python process serving the API as
DevCell's contract, tests/backends/vm/firecracker_contract.py, describes it), so the figure
is an upper bound of DevCell's share of Firecracker's published budgets (boot <= 125 ms,
snapshot restore < 10 ms on KVM): the stand-in's own time is in it.

  boot     FirecrackerApi.configure() + start(): 11 requests (logger, metrics, machine-config,
           boot-source, 3 drives, vsock, serial, InstanceStart)
  restore  FirecrackerApi.load(): logger, metrics, snapshot/load
  1 request  one PUT /logger on an open connection (10 x --runs of them), the steady cost
Peer, same run, same stand-in, in turns: the same requests as pre-built bytes written to a
raw unix socket, each reply read by its Content-Length (the transport's floor). The
difference driver - raw is DevCell's own cost. A fresh stand-in process per run (pre-boot
requests are accepted once), started outside the timing, without its schema check (the tests
do that, and this script checks the requests it times against the contract once, before
timing; in the stand-in it would only add its own time).
Run by hand, never by pytest:

    .venv/bin/python bench/firecracker_api.py --runs 30
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcell.backends.vm.drivers import firecracker_api as api  # noqa: E402
from devcell.backends.vm.drivers.driver import Disk, MachineConfig  # noqa: E402
from tests.backends.vm import firecracker_contract as contract  # noqa: E402

STAND_IN = REPO / "tests" / "backends" / "vm" / "firecracker_fake.py"


def machine(directory: Path) -> MachineConfig:
    return MachineConfig(
        name="devcell-0123456789abcdef-cell_bench0001", directory=directory,
        kernel=Path("/boot/vmlinux"), initrd=directory / "initrd.cpio", cmdline="console=ttyS0",
        memory_mib=128, cpus=1, accel="kvm", driver="firecracker",
        disks=tuple(Disk(directory / f"{n}.img", "raw") for n in ("root", "config", "ws")))


def boot_requests(config: MachineConfig) -> list[tuple[str, str, dict[str, object]]]:
    drives = [("PUT", f"/drives/{api.drive_id(i)}", api.drive(i, d))
              for i, d in enumerate(config.disks)]
    return [("PUT", "/logger", api.logger_config()), ("PUT", "/metrics", api.metrics()),
            ("PUT", "/machine-config", api.machine_config(config)),
            ("PUT", "/boot-source", api.boot_source(config)), *drives,
            ("PUT", "/vsock", api.vsock()), ("PUT", "/serial", api.serial()),
            ("PUT", "/actions", {"action_type": "InstanceStart"})]


def load_requests(state: Path, memory: Path) -> list[tuple[str, str, dict[str, object]]]:
    return [("PUT", "/logger", api.logger_config()), ("PUT", "/metrics", api.metrics()),
            ("PUT", "/snapshot/load", api.snapshot_load(state, memory, resume=True))]


def conforming(requests: list[tuple[str, str, dict[str, object]]]
               ) -> list[tuple[str, str, dict[str, object]]]:
    """The requests, once checked against DevCell's Firecracker contract (outside the timing):
    the bench times only requests the tests would accept."""
    errors = [e for method, path, body in requests
              for e in contract.schema_errors(method, path, body)]
    if errors:
        raise SystemExit("not benchmarking requests the contract refuses: " + "; ".join(errors))
    return requests


def raw_bytes(requests: list[tuple[str, str, dict[str, object]]]) -> list[bytes]:
    out = []
    for method, path, body in requests:
        payload = json.dumps(body).encode()
        out.append(f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                   f"application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
                   + payload)
    return out


def raw_exchange(directory: Path, messages: list[bytes], ok: bytes = b" 204 ") -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(directory / api.API_SOCKET))
    reader = sock.makefile("rb")
    for message in messages:
        sock.sendall(message)
        length = 0
        status = reader.readline()
        while (line := reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        reader.read(length)
        if ok not in status:
            raise SystemExit(f"the stand-in refused a request: {status!r}")
    sock.close()


def stand_in(directory: Path) -> subprocess.Popen[bytes]:
    (directory / api.API_SOCKET).unlink(missing_ok=True)
    process = subprocess.Popen([sys.executable, str(STAND_IN), "--api-sock",
                                str(directory / api.API_SOCKET)], cwd=REPO,
                               env={**os.environ, "PYTHONPATH": str(REPO),
                                    "FAKE_FIRECRACKER_UNCHECKED": "1"})
    while True:  # serving once a request is answered
        try:
            raw_exchange(directory, [b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"], ok=b" 200 ")
            return process
        except OSError:
            time.sleep(0.005)


def timed(directory: Path, work: Callable[[], None]) -> float:
    process = stand_in(directory)
    try:
        began = time.perf_counter()
        work()
        return time.perf_counter() - began
    finally:
        process.kill()
        process.wait()


def warm_requests(directory: Path, count: int) -> dict[str, list[float]]:
    """One request at a time on an open connection, driver and raw socket in turns."""
    process = stand_in(directory)
    [message] = raw_bytes([("PUT", "/logger", api.logger_config())])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(directory / api.API_SOCKET))
    reader = sock.makefile("rb")
    out: dict[str, list[float]] = {"1 request: driver": [], "1 request: raw socket": []}
    try:
        with api.FirecrackerApi(directory) as client:
            for _ in range(count):
                began = time.perf_counter()
                client.call("PUT", "/logger", api.logger_config())
                out["1 request: driver"].append(time.perf_counter() - began)
                began = time.perf_counter()
                sock.sendall(message)
                reader.readline()
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                reader.read(length)
                out["1 request: raw socket"].append(time.perf_counter() - began)
    finally:
        sock.close()
        process.kill()
        process.wait()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devcell-fc-bench-") as tmp:
        directory = Path(tmp)
        config = machine(directory)
        state, memory = directory / "m.vmstate", directory / "m"
        state.write_text(json.dumps({"mem_size_mib": 128}))
        memory.write_bytes(b"")
        boot_raw = raw_bytes(conforming(boot_requests(config)))
        load_raw = raw_bytes(conforming(load_requests(state, memory)))

        def devcell_boot() -> None:
            with api.FirecrackerApi(directory) as client:
                client.configure(config)
                client.start()

        def devcell_load() -> None:
            with api.FirecrackerApi(directory) as client:
                client.load(state, memory, resume=True, timeout=10)

        subjects = {"boot: driver": devcell_boot,
                    "boot: raw socket": lambda: raw_exchange(directory, boot_raw),
                    "restore: driver": devcell_load,
                    "restore: raw socket": lambda: raw_exchange(directory, load_raw)}
        samples: dict[str, list[float]] = {name: [] for name in subjects}
        for _ in range(args.runs):
            for name, work in subjects.items():  # in turns: drift hits all alike
                samples[name].append(timed(directory, work))
        samples.update(warm_requests(directory, args.runs * 10))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{'subject':<22}{'median':>10}{'p90':>10}   runs={args.runs}")
    for name, values in samples.items():
        p90 = sorted(values)[int(len(values) * 0.9) - 1]
        print(f"{name:<22}{medians[name] * 1000:>8.2f}ms{p90 * 1000:>8.2f}ms")
    one = medians["1 request: driver"] - medians["1 request: raw socket"]
    print(f"1 request: DevCell's own cost {one * 1000:.3f} ms (http.client over raw bytes)")
    for what, budget in (("boot", 0.125), ("restore", 0.010)):
        driver, raw = medians[f"{what}: driver"], medians[f"{what}: raw socket"]
        print(f"{what}: driver / raw socket = {driver / raw:.2f}; DevCell's own cost "
              f"(driver - raw) {(driver - raw) * 1000:.2f} ms = {(driver - raw) / budget:.1%} "
              f"of Firecracker's published {budget * 1000:g} ms")


if __name__ == "__main__":
    main()
