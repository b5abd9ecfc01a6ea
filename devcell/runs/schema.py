"""JSON Schemas of what the persistent stores write: the envelope, and the snapshot inside it.

The envelope schema checks only what is needed to read the format version and the checksum;
the snapshot schema (for format version 1) is applied once both are known to be right, so a
file from another version is reported as such, not as a shape error.
"""

from __future__ import annotations

from typing import Any

from devcell.runs import model, runid

DIALECT = "https://json-schema.org/draft/2020-12/schema"
CHECKSUM_PATTERN = r"^sha256:[0-9a-f]{64}(?!\n)$"
TIMESTAMP_PATTERN = model.TIMESTAMP_PATTERN

MAX_EPOCH_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: the last moment an ISO 8601 timestamp of four-digit years holds."""

ENVELOPE: dict[str, Any] = {
    "$schema": DIALECT,
    "title": "DevCell run snapshot envelope",
    "type": "object",
    "additionalProperties": False,
    "required": ["checksum", "snapshot"],
    "properties": {
        "checksum": {"type": "string", "pattern": CHECKSUM_PATTERN},
        "snapshot": {
            "type": "object",
            "required": ["version"],
            "properties": {"version": {"type": "integer"}},
        },
    },
}

SNAPSHOT: dict[str, Any] = {
    "$schema": DIALECT,
    "title": f"DevCell RunSnapshot, format version {model.FORMAT_VERSION}",
    "type": "object",
    "additionalProperties": False,
    "required": ["version", "runId", "planId", "plan", "completedSteps", "suspendedStepId",
                 "suspendedAt", "status"],
    "properties": {
        "version": {"const": model.FORMAT_VERSION},
        "runId": {"type": "string", "pattern": runid.PATTERN},
        "planId": {"type": "string", "minLength": 1},
        "plan": {"type": ["array", "object"]},
        "completedSteps": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["stepId", "outputs"],
                "properties": {
                    "stepId": {"type": "string", "minLength": 1},
                    "outputs": {
                        "type": "object",
                        "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
                    },
                },
            },
        },
        "suspendedStepId": {"type": "string", "minLength": 1},
        "resumeSchema": {"type": ["object", "null"]},
        # ISO 8601 text (what DevCell writes) or epoch milliseconds (the design's form)
        "suspendedAt": {"type": ["string", "number"], "pattern": TIMESTAMP_PATTERN,
                        "minimum": 0, "maximum": MAX_EPOCH_MS},
        "status": {"type": "string"},
    },
}
