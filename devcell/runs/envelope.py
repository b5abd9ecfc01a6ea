"""Bytes <-> RunSnapshot for the persistent stores, with every check a load makes.

What is stored (one line of UTF-8 JSON; the file store adds a newline):

    {"checksum":"sha256:<64 hex>","snapshot":{...RunSnapshot.to_dict(), keys sorted...}}

The checksum is the SHA-256 of the canonical JSON of the `snapshot` object (keys sorted, no
spaces, UTF-8, no NaN or infinities): it covers every field, the format version included.
The snapshot is written in that canonical form, so the stored bytes are exactly what was
hashed; a load re-canonicalises what it parsed, so a reformatted but unchanged file still loads.

A load checks, in this order, and stops at the first failure with CORRUPT_SNAPSHOT and a
specific reason: not empty and not oversized; valid UTF-8; valid JSON (no duplicate keys,
no NaN); the envelope's shape; the format version; the checksum; the snapshot's shape (JSON
Schema, see `schema.py`); the status; step ids unique; the resume schema a valid JSON Schema;
the runId equal to the run id it was stored under. A save applies the same snapshot checks and
refuses (INVALID_SNAPSHOT) what a load would reject.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

import jsonschema
from jsonschema import exceptions as jsonschema_exceptions

from devcell.errors import StorageError
from devcell.runs import model, schema

MAX_BYTES = 16 * 1024 * 1024
"""A snapshot is a plan and scalar outputs; anything larger is refused on save and on load."""
_MESSAGE_CAP = 200


def canonical(payload: Any) -> bytes:
    """The canonical JSON the checksum is taken over (TypeError / ValueError if not JSON)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def checksum_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def encode(snapshot: model.RunSnapshot, *, where: str) -> bytes:
    """The bytes to store for `snapshot`; StorageError(INVALID_SNAPSHOT) if a load would refuse it."""

    def invalid(reason: str) -> StorageError:
        return StorageError(code=StorageError.INVALID_SNAPSHOT, path=where, reason=reason)

    require_snapshot(snapshot, where=where)
    try:
        payload = snapshot.to_dict()
        body = canonical(payload)
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        raise invalid(f"not representable as JSON: {_cap(str(exc))}") from None
    problem = _snapshot_problem(payload)
    if problem is not None:
        raise invalid(problem)
    data = b'{"checksum":"' + checksum_of(body).encode("ascii") + b'","snapshot":' + body + b"}"
    if len(data) > MAX_BYTES:
        raise invalid(f"{len(data)} bytes encoded, more than the {MAX_BYTES} byte limit")
    return data


def require_snapshot(value: object, *, where: str) -> model.RunSnapshot:
    """`value` if it is a RunSnapshot, else StorageError(INVALID_SNAPSHOT) at `where`."""
    if not isinstance(value, model.RunSnapshot):
        raise StorageError(code=StorageError.INVALID_SNAPSHOT, path=where,
                           reason=f"expected a RunSnapshot, got {type(value).__name__}")
    return value


def decode(data: bytes, *, run_id: str, where: str, stored_under: str = "location"
           ) -> model.RunSnapshot:
    """The snapshot stored as `data` under `run_id`, or StorageError(CORRUPT_SNAPSHOT) at `where`."""

    def corrupt(reason: str) -> StorageError:
        return StorageError(code=StorageError.CORRUPT_SNAPSHOT, path=where, reason=reason)

    if not data:
        raise corrupt("empty: no bytes where a snapshot was expected")
    if len(data) > MAX_BYTES:
        raise corrupt(f"{len(data)} bytes, more than the {MAX_BYTES} byte limit")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise corrupt(f"not valid UTF-8: {exc.reason} at byte {exc.start} of {len(data)}") from None
    try:
        document = json.loads(text, object_pairs_hook=_refuse_duplicate_keys,
                              parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        ended = " (the data ends there: truncated?)" if exc.pos >= len(text.rstrip()) else ""
        raise corrupt(f"not valid JSON: {exc.msg}: line {exc.lineno} column {exc.colno}, "
                      f"character {exc.pos} of {len(text)}{ended}") from None
    except ValueError as exc:  # a duplicate key, NaN/Infinity, an integer too long to parse
        raise corrupt(f"not valid JSON: {_cap(str(exc))}") from None
    except RecursionError:
        raise corrupt("not valid JSON: nested too deeply") from None

    error = _first_error(_validator("envelope"), document)
    if error is not None:
        raise corrupt(f"wrong shape: {error}")
    payload = document["snapshot"]
    version = payload["version"]
    if version != model.FORMAT_VERSION:
        raise corrupt(f"unsupported format version {version} "
                      f"(this DevCell reads version {model.FORMAT_VERSION})")
    try:
        computed = checksum_of(canonical(payload))
    except (ValueError, RecursionError) as exc:  # e.g. 1e999 parses as infinity
        raise corrupt(f"holds a value JSON cannot represent: {_cap(str(exc))}") from None
    if computed != document["checksum"]:
        raise corrupt(f"checksum mismatch: recorded {document['checksum']}, "
                      f"computed {computed} over the snapshot")
    problem = _snapshot_problem(payload)
    if problem is not None:
        raise corrupt(problem)
    if payload["runId"] != run_id:
        raise corrupt(f"runId {payload['runId']!r} does not match its {stored_under} {run_id!r}")
    return model.RunSnapshot.from_dict(payload)


def _snapshot_problem(payload: dict[str, Any]) -> str | None:
    """What is wrong with a snapshot document (format version 1), or None."""
    error = _first_error(_validator("snapshot"), payload, prefix="snapshot")
    if error is not None:
        return f"wrong shape: {error}"
    if payload["status"] != model.RunStatus.SUSPENDED:
        return f"status is {payload['status']!r}, expected {str(model.RunStatus.SUSPENDED)!r}"
    seen: set[str] = set()
    for step in payload["completedSteps"]:
        if step["stepId"] in seen:
            return f"completedSteps records step {step['stepId']!r} twice"
        seen.add(step["stepId"])
    resume_schema = payload.get("resumeSchema")
    if resume_schema is not None:
        # Checking a schema against its meta-schema costs more than everything else a load
        # does; gates use a handful of distinct schemas, so remember the verdicts.
        return _resume_schema_problem(canonical(resume_schema).decode("utf-8"))
    return None


@functools.lru_cache(maxsize=256)
def _resume_schema_problem(canonical_schema: str) -> str | None:
    resume_schema = json.loads(canonical_schema)
    cls = jsonschema.validators.validator_for(resume_schema,
                                              default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(resume_schema)
    except jsonschema_exceptions.SchemaError as exc:
        return f"resumeSchema is not a valid JSON Schema: {_cap(exc.message)}"
    return None


@functools.cache
def _validator(which: str) -> jsonschema.protocols.Validator:
    document = schema.ENVELOPE if which == "envelope" else schema.SNAPSHOT
    return jsonschema.Draft202012Validator(document)


def _first_error(validator: jsonschema.protocols.Validator, instance: Any, *,
                 prefix: str = "$") -> str | None:
    error = jsonschema_exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return None
    where = prefix + error.json_path[1:]
    return f"{_cap(error.message)} (at {where})"


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _cap(message: str) -> str:
    return message if len(message) <= _MESSAGE_CAP else message[:_MESSAGE_CAP - 1] + "…"
