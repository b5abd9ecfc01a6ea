"""DevCell's own account of the part of Firecracker's HTTP API its driver uses.

Why this exists: the driver (devcell/backends/vm/drivers/firecracker_api.py) has not run against a real
Firecracker here, so its tests check every request it sends against a description of the API.
That description is this module, written for DevCell: one `Endpoint` per operation the driver
calls, each with its method, path pattern, the JSON Schema of its body and the status
Firecracker documents for success. Only facts about the API are recorded (field names, their
types, which are required, the allowed words, numeric bounds); nothing is copied.

Source of the facts: Firecracker's published API description, src/firecracker/swagger/
firecracker.yaml in github.com/firecracker-microvm/firecracker at commit
81b38b9dad6056d7a48073e95ac5a9aed51cb2ab (2026-08-21, API version 1.17.0-dev).
tests/backends/vm/test_firecracker_contract.py compares the two when a maintainer points
DEVCELL_FIRECRACKER_SWAGGER at a copy of that file (see docs/backends.md).

Stricter than upstream on one point, on purpose: every object refuses fields it does not list
(Firecracker's types reject unknown fields; the published description alone would let a
misspelt field through). Bodies are checked with JSON Schema draft 4, as the description's
Swagger 2.0 uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import jsonschema

UPSTREAM_PATH = "src/firecracker/swagger/firecracker.yaml"
UPSTREAM_COMMIT = "81b38b9dad6056d7a48073e95ac5a9aed51cb2ab"
API_VERSION = "1.17.0-dev"

Schema = dict[str, Any]


# -- small builders: each body is an object of named fields, some of them required ----------

def _text() -> Schema:
    return {"type": "string"}


def _flag() -> Schema:
    return {"type": "boolean"}


def _one_of(*words: str) -> Schema:
    return {"type": "string", "enum": list(words)}


def _count(*, low: int | None = None, high: int | None = None) -> Schema:
    bounds = {"minimum": low, "maximum": high}
    return {"type": "integer", **{k: v for k, v in bounds.items() if v is not None}}


def _record(*, needs: dict[str, Schema], may: dict[str, Schema] | None = None) -> Schema:
    """An object with required fields `needs`, optional fields `may`, and nothing else."""
    fields = {**needs, **(may or {})}
    schema: Schema = {"type": "object", "properties": fields, "additionalProperties": False}
    if needs:
        schema["required"] = sorted(needs)
    return schema


def _token_bucket() -> Schema:
    """Tokens (bytes or operations) refilled over refill_time ms, plus a first extra burst."""
    return _record(needs={"size": _count(low=0), "refill_time": _count(low=0)},
                   may={"one_time_burst": _count(low=0)})


def _rate_limiter() -> Schema:
    return _record(needs={}, may={"bandwidth": _token_bucket(), "ops": _token_bucket()})


# -- what each body may hold ---------------------------------------------------------------

LOGGER = _record(needs={}, may={
    "log_path": _text(), "level": _one_of("Error", "Warning", "Info", "Debug", "Trace", "Off"),
    "show_level": _flag(), "show_log_origin": _flag(), "module": _text()})

METRICS = _record(needs={"metrics_path": _text()}, may={
    "emit_id": _flag(),
    "properties": {"type": "object", "additionalProperties": _text()}})

MACHINE_CONFIG = _record(
    needs={"vcpu_count": _count(low=1, high=32), "mem_size_mib": _count()},
    may={"smt": _flag(), "track_dirty_pages": _flag(),
         "cpu_template": _one_of("C3", "T2", "T2S", "T2CL", "T2A", "V1N1", "None"),
         "huge_pages": _one_of("None", "Transparent", "2M")})

BOOT_SOURCE = _record(needs={"kernel_image_path": _text()},
                      may={"initrd_path": _text(), "boot_args": _text()})

DRIVE = _record(needs={"drive_id": _text(), "is_root_device": _flag()}, may={
    "path_on_host": _text(), "is_read_only": _flag(), "partuuid": _text(),
    "cache_type": _one_of("Unsafe", "Writeback"), "io_engine": _one_of("Sync", "Async"),
    "rate_limiter": _rate_limiter(), "socket": _text()})

VSOCK = _record(needs={"guest_cid": _count(low=3), "uds_path": _text()},
                may={"vsock_id": _text()})

SERIAL = _record(needs={}, may={"serial_out_path": _text(), "rate_limiter": _token_bucket()})

ACTION = _record(needs={"action_type": _one_of("InstanceStart", "SendCtrlAltDel",
                                               "FlushMetrics")})

VM_STATE = _record(needs={"state": _one_of("Paused", "Resumed")})

SNAPSHOT_CREATE = _record(needs={"snapshot_path": _text(), "mem_file_path": _text()},
                          may={"snapshot_type": _one_of("Full", "Diff")})

SNAPSHOT_LOAD = _record(needs={"snapshot_path": _text()}, may={
    "mem_file_path": _text(),
    "mem_backend": _record(needs={"backend_type": _one_of("File", "Uffd"),
                                  "backend_path": _text()}),
    "resume_vm": _flag(), "track_dirty_pages": _flag(), "enable_diff_snapshots": _flag(),
    "clock_realtime": _flag(), "huge_pages": _one_of("Snapshot", "None", "Transparent", "2M"),
    "network_overrides": {"type": "array", "items": _record(
        needs={"iface_id": _text(), "host_dev_name": _text()})},
    "vsock_override": _record(needs={"uds_path": _text()})})

INSTANCE_INFO = _record(needs={
    "app_name": _text(), "id": _text(), "vmm_version": _text(),
    "state": _one_of("Not started", "Running", "Paused")})
"""Not a request body: what GET / answers (the stand-in checks its own answer with it)."""


# -- the operations ------------------------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
    """One operation: `path` may hold one `{name}` segment (e.g. /drives/{drive_id})."""

    method: str
    path: str
    body: Schema | None
    """None: the operation takes no body."""
    success: int
    """The status Firecracker documents for success (204 No Content, 200 with a JSON reply)."""
    body_required: bool = True

    def matches(self, method: str, path: str) -> bool:
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(self.path))
        return method == self.method and re.fullmatch(pattern, path) is not None


ENDPOINTS = (
    Endpoint("GET", "/", None, 200),
    Endpoint("PUT", "/logger", LOGGER, 204),
    Endpoint("PUT", "/metrics", METRICS, 204),
    Endpoint("PUT", "/machine-config", MACHINE_CONFIG, 204, body_required=False),
    Endpoint("PUT", "/boot-source", BOOT_SOURCE, 204),
    Endpoint("PUT", "/drives/{drive_id}", DRIVE, 204),
    Endpoint("PUT", "/vsock", VSOCK, 204),
    Endpoint("PUT", "/serial", SERIAL, 204),
    Endpoint("PUT", "/actions", ACTION, 204),
    Endpoint("PATCH", "/vm", VM_STATE, 204),
    Endpoint("PUT", "/snapshot/create", SNAPSHOT_CREATE, 204),
    Endpoint("PUT", "/snapshot/load", SNAPSHOT_LOAD, 204),
)


def endpoint(method: str, path: str) -> Endpoint | None:
    """The operation a request is for, or None when the driver has no business sending it."""
    return next((e for e in ENDPOINTS if e.matches(method, path)), None)


@cache
def _validator(method: str, path: str) -> jsonschema.Draft4Validator:
    found = endpoint(method, path)
    assert found is not None and found.body is not None
    jsonschema.Draft4Validator.check_schema(found.body)
    return jsonschema.Draft4Validator(found.body)


def validator_for(found: Endpoint) -> jsonschema.Draft4Validator:
    return _validator(found.method, found.path)


def schema_errors(method: str, path: str, body: Any) -> list[str]:
    """Everything this description says is wrong with a request (empty: it conforms)."""
    found = endpoint(method, path)
    if found is None:
        return [f"{method} {path}: no such operation in DevCell's Firecracker contract"]
    if found.body is None:
        return [] if body is None else [f"{method} {path} takes no body"]
    if body is None:
        return [f"{method} {path}: body required"] if found.body_required else []
    return [f"{method} {path}: {e.message} at {list(e.absolute_path)}"
            for e in validator_for(found).iter_errors(body)]


def answer_errors(body: Any) -> list[str]:
    """What is wrong with an answer to GET / (InstanceInfo)."""
    return [e.message for e in jsonschema.Draft4Validator(INSTANCE_INFO).iter_errors(body)]
