"""A stand-in for Firecracker's API server, checked against DevCell's description of
Firecracker's API (firecracker_contract.py), for testing the requests DevCell sends.

This tests requests, not Firecracker: the stand-in knows only what the contract says
(paths, methods, bodies, success statuses) plus the few rules Firecracker's documentation
states (pre-boot only, post-boot only, snapshot/load only on a fresh process, snapshot/create
only while Paused, Diff only with dirty-page tracking). Every request is recorded with the
schema errors found in it; a request that breaks the schema is answered 400 with a
`fault_message`, as Firecracker answers.

Run as a program (`firecracker_fake.py --api-sock PATH --id ID`, started as `firecracker` by
tests/backends/vm/test_firecracker_driver.py) it serves until killed and appends each request
to $FAKE_FIRECRACKER_RECORD as a JSON line ($FAKE_FIRECRACKER_UNCHECKED=1: no schema check,
for the bench only).
"""

from __future__ import annotations

import json
import os
import socketserver
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

try:
    from tests.backends.vm import firecracker_contract as contract
except ImportError:  # run as a program: this file's directory is on sys.path, not the repo
    import firecracker_contract as contract  # type: ignore[no-redef]

PRE_BOOT = {"/boot-source", "/machine-config", "/vsock", "/drives/{drive_id}", "/serial",
            "/logger", "/metrics"}
BEFORE_LOAD = {"/logger", "/metrics"}
schema_errors = contract.schema_errors


@dataclass
class Recorded:
    method: str
    path: str
    body: Any
    errors: list[str]
    status: int


@dataclass
class FakeState:
    """What the stand-in remembers of its machine: enough to apply the description's rules."""

    state: str = "Not started"
    configured: set[str] = field(default_factory=set)
    machine: dict[str, Any] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    record_file: Path | None = None
    unchecked: bool = False
    """No schema check (bench/firecracker_api.py only: it times the driver, not the check)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any] | None]:
        errors = [] if self.unchecked else schema_errors(method, path, body)
        status, reply = (400, {"fault_message": "; ".join(errors)}) if errors else \
            self._apply(method, path, body)
        recorded = Recorded(method, path, body, errors, status)
        self.requests.append(recorded)
        if self.record_file is not None:
            with self.record_file.open("a") as f:
                f.write(json.dumps(recorded.__dict__) + "\n")
        return status, reply

    def _apply(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any] | None]:
        found = contract.endpoint(method, path)
        assert found is not None
        template = found.path
        if method == "GET" and template == "/":
            info = {"app_name": "Firecracker", "id": "fake", "state": self.state,
                    "vmm_version": contract.API_VERSION}
            assert contract.answer_errors(info) == []
            return found.success, info
        if template in PRE_BOOT and self.state != "Not started":
            return _fault(f"{template} is pre-boot only")
        if template == "/machine-config":
            self.machine = dict(body)
        if template == "/actions" and body["action_type"] == "InstanceStart":
            if "/boot-source" not in self.configured or self.state != "Not started":
                return _fault("cannot start: no boot source, or already started")
            self.state = "Running"
        if template == "/vm":
            if self.state == "Not started":
                return _fault("the microVM is not running")
            self.state = "Paused" if body["state"] == "Paused" else "Running"
        if template == "/snapshot/create":
            return self._create(body)
        if template == "/snapshot/load":
            return self._load(body)
        self.configured.add(template)
        return found.success, None

    def _create(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        if self.state != "Paused":
            return _fault("the microVM must be Paused to be snapshotted")
        if body.get("snapshot_type") == "Diff" and not self.machine.get("track_dirty_pages"):
            return _fault("Diff snapshots need track_dirty_pages")
        memory = Path(body["mem_file_path"])
        with memory.open("wb") as f:  # sparse, the machine's size, as Firecracker writes it
            f.truncate(int(self.machine.get("mem_size_mib", 128)) << 20)
        Path(body["snapshot_path"]).write_bytes(json.dumps(self.machine).encode())
        return 204, None

    def _load(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        if self.configured - BEFORE_LOAD or self.state != "Not started":
            return _fault("snapshot/load is only accepted on a fresh process")
        backend = body.get("mem_backend") or {}
        if ("mem_file_path" in body) == bool(backend):
            return _fault("exactly one of mem_file_path and mem_backend")
        for name in (body["snapshot_path"], backend.get("backend_path")):
            if name and not Path(name).is_file():
                return _fault(f"cannot open {name}")
        self.machine = json.loads(Path(body["snapshot_path"]).read_text())
        self.state = "Running" if body.get("resume_vm") else "Paused"
        return 204, None


def _fault(message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"fault_message": message}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        with self.server.fake.lock:
            status, reply = self.server.fake.answer(self.command, self.path, body)
        payload = json.dumps(reply).encode() if reply is not None else b""
        self.send_response(status)
        if payload:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        try:
            self.wfile.write(payload)
        except BrokenPipeError:
            pass  # the client went away (a readiness probe, a test's timeout)

    do_GET = do_PUT = do_PATCH = _serve

    def address_string(self) -> str:
        return "api.sock"

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    fake: FakeState


def serve(socket_path: Path, fake: FakeState) -> _Server:
    """Serve `fake` on `socket_path` from a thread; shut it down with .shutdown()."""
    server = _Server(str(socket_path), _Handler)
    server.fake = fake
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str]) -> None:
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    record = os.environ.get("FAKE_FIRECRACKER_RECORD")
    fake = FakeState(record_file=Path(record) if record else None,
                     unchecked=os.environ.get("FAKE_FIRECRACKER_UNCHECKED") == "1")
    for each in contract.ENDPOINTS:  # built before serving: the first answer is prompt
        if each.body is not None:
            contract.validator_for(each)
    server = _Server(args["--api-sock"], _Handler)
    server.fake = fake
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
