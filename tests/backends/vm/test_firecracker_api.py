"""Every request the Firecracker driver makes, checked against Firecracker's published API
description, and its answers turned into DevCell's errors. Tests the requests, not
Firecracker (which has not run on this host): see firecracker_fake.py."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from devcell.backends.vm.drivers import firecracker_api as api
from devcell.backends.vm.drivers.driver import Disk, MachineConfig
from devcell.errors import BackendError, BackendRefused, BackendUnavailable
from tests.backends.vm import firecracker_contract as contract
from tests.backends.vm import firecracker_fake as fake


def machine(directory: Path, *, disk_format: str = "raw") -> MachineConfig:
    return MachineConfig(
        name="devcell-0123456789abcdef-cell_fc0001", directory=directory,
        kernel=Path("/boot/vmlinux"), initrd=directory / "initrd.cpio",
        cmdline="console=ttyS0 quiet panic=-1", memory_mib=256, cpus=2,
        disks=(Disk(directory / "root.img", disk_format), Disk(directory / "config.img", "raw",
                                                                read_only=True),
               Disk(directory / "workspace.img", "raw")),
        accel="kvm", driver="firecracker")


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[fake.FakeState]:
    state = fake.FakeState()
    server = fake.serve(tmp_path / api.API_SOCKET, state)
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def sent(state: fake.FakeState) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in state.requests]


def assert_conforming(state: fake.FakeState) -> None:
    assert state.requests, "no request was made"
    for request in state.requests:
        assert request.errors == [], request
        described = contract.endpoint(request.method, request.path)
        assert described is not None and request.status == described.success, request


def test_the_contract_names_its_source_and_covers_every_request_the_driver_makes() -> None:
    doc = contract.__doc__ or ""
    assert contract.UPSTREAM_PATH in doc.replace("\n", "").replace(" ", "")
    assert contract.UPSTREAM_COMMIT in doc
    described = {(e.method, e.path) for e in contract.ENDPOINTS}
    assert described == {
        ("GET", "/"), ("PUT", "/logger"), ("PUT", "/metrics"), ("PUT", "/machine-config"),
        ("PUT", "/boot-source"), ("PUT", "/drives/{drive_id}"), ("PUT", "/vsock"),
        ("PUT", "/serial"), ("PUT", "/actions"), ("PATCH", "/vm"), ("PUT", "/snapshot/create"),
        ("PUT", "/snapshot/load")}
    for each in contract.ENDPOINTS:
        if each.body is not None:
            jsonschema.Draft4Validator.check_schema(each.body)
            assert each.body["additionalProperties"] is False


@pytest.mark.parametrize(("path", "body"), [
    ("/machine-config", api.machine_config(machine(Path("/cells/c")))),
    ("/boot-source", api.boot_source(machine(Path("/cells/c")))),
    ("/drives/vda", api.drive(0, Disk(Path("/cells/c/root.img"), "raw"))),
    ("/drives/vdb", api.drive(1, Disk(Path("/cells/c/config.img"), "raw", read_only=True))),
    ("/vsock", api.vsock()),
    ("/serial", api.serial()),
    ("/logger", api.logger_config()),
    ("/metrics", api.metrics()),
    ("/snapshot/create", api.snapshot_create(Path("/s/m.vmstate"), Path("/s/m"),
                                             api.SnapshotKind.FULL)),
    ("/snapshot/create", api.snapshot_create(Path("/s/m.vmstate"), Path("/s/m"),
                                             api.SnapshotKind.DIFF)),
    ("/snapshot/load", api.snapshot_load(Path("/s/m.vmstate"), Path("/s/m"), resume=True)),
])
def test_each_request_body_conforms_to_the_description(path: str, body: dict[str, object]
                                                       ) -> None:
    assert contract.schema_errors("PUT", path, body) == []


@pytest.mark.parametrize(("path", "body", "wrong"), [
    ("/machine-config", {"vcpu_count": 2, "mem_size": 256}, "mem_size"),
    ("/machine-config", {"vcpu_count": 0, "mem_size_mib": 256}, "minimum"),
    ("/drives/vda", {"drive_id": "vda", "path_on_host": "/x"}, "is_root_device"),
    ("/snapshot/create", {"snapshot_path": "/a", "mem_file_path": "/b",
                          "snapshot_type": "Incremental"}, "Incremental"),
    ("/vsock", {"guest_cid": 2, "uds_path": "v.sock"}, "minimum"),
    ("/actions", {"action_type": "Reboot"}, "Reboot"),
    ("/boot-source", {"initrd_path": "/i"}, "kernel_image_path"),
    ("/serial", {"serial_out_path": "c", "rate_limiter": {"size": 1}}, "refill_time"),
    ("/snapshot/load", {"snapshot_path": "/s", "mem_backend": {"backend_type": "Disk",
                                                               "backend_path": "/m"}}, "Disk"),
    ("/logger", {"log_path": "l", "level": "Verbose"}, "Verbose"),
])
def test_the_check_refuses_what_the_description_forbids(path: str, body: dict[str, object],
                                                        wrong: str) -> None:
    errors = contract.schema_errors("PUT", path, body)
    assert errors and wrong in " ".join(errors)


def test_the_check_refuses_unknown_operations_and_missing_or_stray_bodies() -> None:
    assert "no such operation" in contract.schema_errors("DELETE", "/vm", None)[0]
    assert "no such operation" in contract.schema_errors("PUT", "/network-interfaces/eth0", {})[0]
    assert "no such operation" in contract.schema_errors("PUT", "/drives/a/b", {})[0]
    assert "body required" in contract.schema_errors("PUT", "/vsock", None)[0]
    assert "takes no body" in contract.schema_errors("GET", "/", {"x": 1})[0]
    assert contract.schema_errors("GET", "/", None) == []


def test_a_boot_configures_then_starts_with_conforming_requests(tmp_path: Path,
                                                                 served: fake.FakeState) -> None:
    config = machine(tmp_path)
    with api.FirecrackerApi(tmp_path) as client:
        assert client.state() == "Not started"
        client.configure(config)
        client.start()
        assert client.state() == "Running"
    assert_conforming(served)
    assert sent(served) == [
        ("GET", "/"), ("PUT", "/logger"), ("PUT", "/metrics"), ("PUT", "/machine-config"),
        ("PUT", "/boot-source"), ("PUT", "/drives/vda"), ("PUT", "/drives/vdb"),
        ("PUT", "/drives/vdc"), ("PUT", "/vsock"), ("PUT", "/serial"), ("PUT", "/actions"),
        ("GET", "/")]
    bodies = {r.path: r.body for r in served.requests}
    assert bodies["/machine-config"] == {"vcpu_count": 2, "mem_size_mib": 256, "smt": False,
                                         "track_dirty_pages": True}
    assert bodies["/drives/vdb"]["is_read_only"] is True
    assert not any(r.path.startswith("/network-interfaces") for r in served.requests)


def test_pause_full_and_diff_snapshots_and_resume(tmp_path: Path,
                                                  served: fake.FakeState) -> None:
    with api.FirecrackerApi(tmp_path) as client:
        client.configure(machine(tmp_path))
        client.start()
        with pytest.raises(BackendRefused, match="must be Paused"):
            client.snapshot(tmp_path / "m.vmstate", tmp_path / "m", api.SnapshotKind.FULL,
                            timeout=5)
        client.set_state(api.VmState.PAUSED)
        assert client.state() == "Paused"
        client.snapshot(tmp_path / "full.vmstate", tmp_path / "full", api.SnapshotKind.FULL,
                        timeout=5)
        client.snapshot(tmp_path / "diff.vmstate", tmp_path / "diff", api.SnapshotKind.DIFF,
                        timeout=5)
        client.set_state(api.VmState.RESUMED)
        assert client.state() == "Running"
    assert (tmp_path / "full").stat().st_size == 256 << 20
    assert [r.body["snapshot_type"] for r in served.requests
            if r.path == "/snapshot/create" and r.status == 204] == ["Full", "Diff"]
    assert all(r.errors == [] for r in served.requests)


def test_a_load_maps_the_memory_file_and_resumes(tmp_path: Path) -> None:
    first, second = fake.FakeState(), fake.FakeState()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    servers = [fake.serve(tmp_path / "a" / api.API_SOCKET, first),
               fake.serve(tmp_path / "b" / api.API_SOCKET, second)]
    try:
        with api.FirecrackerApi(tmp_path / "a") as client:
            client.configure(machine(tmp_path / "a"))
            client.start()
            client.set_state(api.VmState.PAUSED)
            client.snapshot(tmp_path / "m.vmstate", tmp_path / "m", api.SnapshotKind.FULL,
                            timeout=5)
        with api.FirecrackerApi(tmp_path / "b") as client:
            client.load(tmp_path / "m.vmstate", tmp_path / "m", resume=True, timeout=5)
            assert client.state() == "Running"
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    assert_conforming(second)
    load = [r for r in second.requests if r.path == "/snapshot/load"][0]
    assert load.body["mem_backend"] == {"backend_type": "File",
                                        "backend_path": str(tmp_path / "m")}
    assert load.body["resume_vm"] is True and "mem_file_path" not in load.body


def test_a_load_on_a_configured_process_is_refused_with_firecrackers_words(
        tmp_path: Path, served: fake.FakeState) -> None:
    with api.FirecrackerApi(tmp_path) as client:
        client.configure(machine(tmp_path))
        with pytest.raises(BackendRefused, match="only accepted on a fresh process") as caught:
            client.load(tmp_path / "m.vmstate", tmp_path / "m", resume=True, timeout=5)
    assert "HTTP 400" in str(caught.value) and caught.value.permanent


def test_a_qcow2_disk_is_refused_before_any_request() -> None:
    with pytest.raises(BackendRefused, match="raw disks only"):
        api.drive(0, Disk(Path("/cells/c/root.qcow2"), "qcow2"))


def _raw_server(path: Path, answer: bytes | None) -> threading.Thread:
    """A unix socket that reads one request and answers `answer` (None: never answers)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def run() -> None:
        conn, _ = listener.accept()
        request = b""
        while b"\r\n\r\n" not in request:  # the whole request: headers, then its body
            request += conn.recv(65536)
        head, _, body = request.partition(b"\r\n\r\n")
        length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:")]
        while length and len(body) < length[0]:
            body += conn.recv(65536)
        if answer is not None:
            try:
                conn.sendall(answer)
            except BrokenPipeError:
                pass  # the client stopped reading at its bound
        else:
            threading.Event().wait(3)
        conn.close()
        listener.close()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_server_error_is_retryable_and_carries_the_fault_message(tmp_path: Path) -> None:
    body = b'{"fault_message": "Internal error: \\u001b[31mred"}'
    _raw_server(tmp_path / api.API_SOCKET, b"HTTP/1.1 500 Internal Server Error\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    with pytest.raises(BackendError) as caught, api.FirecrackerApi(tmp_path) as client:
        client.start()
    assert not isinstance(caught.value, BackendRefused) and not caught.value.permanent
    assert "Internal error" in str(caught.value) and "\x1b" not in str(caught.value)


def test_an_oversized_reply_is_refused(tmp_path: Path) -> None:
    _raw_server(tmp_path / api.API_SOCKET, b"HTTP/1.1 200 OK\r\nContent-Length: 999999999"
                b"\r\n\r\n{")
    with pytest.raises(BackendError, match="more than"), api.FirecrackerApi(tmp_path) as c:
        c.state()


def test_a_reply_without_a_length_is_read_up_to_the_bound(tmp_path: Path) -> None:
    _raw_server(tmp_path / api.API_SOCKET, b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
                + b"x" * (2 << 20))
    with pytest.raises(BackendError, match="longer than"), api.FirecrackerApi(tmp_path) as c:
        c.state()


def test_a_silent_server_times_out_and_a_missing_one_is_unavailable(tmp_path: Path) -> None:
    _raw_server(tmp_path / api.API_SOCKET, None)
    with pytest.raises(BackendUnavailable, match="in time"), \
            api.FirecrackerApi(tmp_path, timeout=0.3) as client:
        client.state()
    with pytest.raises(BackendUnavailable, match="cannot reach"), \
            api.FirecrackerApi(tmp_path / "nowhere") as client:
        client.state()
