"""Every error class answers one problem document shape, user strings escaped."""

from __future__ import annotations

import pytest

from devcell import errors
from devcell.server import problems


@pytest.mark.parametrize("exc, status, slug", [
    (errors.ManifestError([errors.Problem("f.yaml", "bad", line=3, field="spec.x")]), 422,
     "manifest-invalid"),
    (errors.SelectorError("x"), 400, "bad-selector"),
    (errors.UsageError("x"), 400, "bad-request"),
    (errors.NotFound("x"), 404, "not-found"),
    (errors.Conflict("x"), 409, "conflict"),
    (errors.StateUnusable("x", cause="DISK_FULL", path="/p"), 503, "state-unusable"),
    (errors.StateError("x"), 503, "state-failed"),
    (errors.BackendUnavailable("x"), 503, "backend-unavailable"),
    (errors.BackendError("x"), 502, "backend-failed"),
    (errors.DevCellError("x"), 500, "failed"),
    (problems.HttpProblem(413, "body-too-large", "Content too large", "x"), 413,
     "body-too-large"),
])
def test_each_class_has_its_status(exc: BaseException, status: int, slug: str) -> None:
    doc = problems.of_error(exc)
    assert doc["status"] == status and doc["type"] == problems.TYPE_BASE + slug
    assert set(doc) >= {"type", "title", "status", "detail"}
    assert status in problems.STATUSES


def test_a_bug_says_nothing_of_itself() -> None:
    doc = problems.of_error(KeyError("secret-value"))
    assert doc["status"] == 500 and "secret-value" not in str(doc)


def test_problems_are_located_and_escaped() -> None:
    doc = problems.of_error(errors.ManifestError([errors.Problem(
        "f\x1b[2J.yaml", "bad \x07", line=3, column=2, kind="Cell", name="a", field="spec.x")]))
    (one,) = doc["problems"]
    assert one == {"file": "f\\x1b[2J.yaml", "message": "bad \\x07", "line": 3, "column": 2,
                   "kind": "Cell", "name": "a", "field": "spec.x"}
    assert "\x1b" not in doc["detail"]


def test_a_whole_token_in_a_detail_is_cut_to_its_id() -> None:
    """A path or name a token was pasted into is repeated by its id alone (the route's 404
    and 405 repeat the path): an answer, or a terminal showing it, never holds a secret."""
    token = "dct_0123456789ab_" + "e" * 64
    doc = problems.of_error(errors.NotFound(f"no API route /api/v1/tokens/{token}/x"))
    assert "e" * 64 not in doc["detail"]
    assert "/api/v1/tokens/dct_0123456789ab_… (not shown)/x" in doc["detail"]


def test_a_client_gone_mid_request_is_no_error_of_the_daemons(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that closed before its body was read (an upload given up, a client killed)
    is said once at INFO, not as `ERROR API request failed: ClientDisconnect: ` (no reason),
    which any client could repeat at will (attack46 F5); the daemon's own failures still
    are errors."""
    from starlette.requests import ClientDisconnect

    from devcell.server import app

    said: list[tuple[str, str]] = []

    class Recorder:
        def info(self, message: str, *args: object) -> None:
            said.append(("INFO", message.format(*args)))

        def error(self, message: str, *args: object) -> None:
            said.append(("ERROR", message.format(*args)))

    monkeypatch.setattr(app, "logger", Recorder())
    assert app._problem(ClientDisconnect()).status_code == 500
    assert app._problem(RuntimeError("boom")).status_code == 500
    assert said == [("INFO", "API client went away before its request's body was read"),
                    ("ERROR", "API request failed: RuntimeError: boom")]
