"""A request's JSON body as the API's actions read it: one object of the fields it names,
each refusal a UsageError saying what is wrong (a 400 problem), never a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from devcell.errors import UsageError
from devcell.names import printable


def json_object(data: bytes, what: str, fields: Iterable[str], shape: str) -> dict[str, Any]:
    """The body, which must be a JSON object of only `fields`: `what` names the request in
    the refusals, `shape` says what the object holds ("a JSON object with ...")."""
    try:
        body = json.loads(data or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise UsageError("the body is not JSON this action reads: it is nested too "
                         "deep") from None
    if not isinstance(body, dict):
        raise UsageError(f"the body of {what}: a JSON object with {shape}")
    allowed = list(fields)
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise UsageError(f"{what}: unknown field {printable(unknown[0])!r} (fields: "
                         f"{', '.join(allowed)})")
    return body
