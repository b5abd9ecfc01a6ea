"""Every error the API answers is one problem document (RFC 9457,
application/problem+json): `type`, `title`, `status`, `detail`; a manifest's problems also
as `problems` (file, line, column, kind, name, field, message: `apply -f`'s, located the
same way). Never a traceback: an error DevCell did not raise on purpose is a 500 whose
detail says only that, and the daemon's log keeps the rest.
"""

from __future__ import annotations

from typing import Any

from devcell import errors
from devcell.names import printable

MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "https://devcell.dev/problems/"


class HttpProblem(Exception):
    """An error of the HTTP exchange itself (a body too large or too slow, a route or
    method that does not exist, a media type not accepted): raised by the app, answered as
    its problem document."""

    def __init__(self, status: int, slug: str, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.slug, self.title, self.detail = status, slug, title, detail


# Most specific first: the first class an error is an instance of decides.
_CLASSES: list[tuple[type[BaseException], int, str, str]] = [
    (errors.ConfigError, 500, "config-invalid", "DevCell's configuration cannot be used"),
    (errors.ManifestError, 422, "manifest-invalid", "The manifests are invalid"),
    (errors.SelectorError, 400, "bad-selector", "The selector cannot be parsed"),
    (errors.UsageError, 400, "bad-request", "The request is not valid"),
    (errors.NotFound, 404, "not-found", "Not found"),
    (errors.Conflict, 409, "conflict", "Conflict"),
    (errors.VersionGone, 410, "gone", "The version is too old"),
    (errors.StateUnusable, 503, "state-unusable", "The state directory cannot be used"),
    (errors.StorageError, 503, "storage-failed", "Storage failed"),
    (errors.StateError, 503, "state-failed", "The state database failed"),
    (errors.ArchiveRefused, 422, "archive-refused", "The archive is refused"),
    (errors.BackendUnavailable, 503, "backend-unavailable", "The backend is unavailable"),
    (errors.BackendError, 502, "backend-failed", "The backend failed"),
    (errors.TemporaryError, 503, "temporarily-unavailable", "Temporarily unavailable"),
]
# The authentication errors land with devcell/auth (issue 27): found by name, so this module
# works before and after.
for _name, _status, _slug, _title in (("Unauthenticated", 401, "unauthenticated",
                                       "Not authenticated"),
                                      ("Forbidden", 403, "forbidden", "Forbidden")):
    _cls = getattr(errors, _name, None)
    if isinstance(_cls, type):
        _CLASSES.insert(0, (_cls, _status, _slug, _title))

STATUSES = sorted({400, 401, 403, 404, 405, 406, 408, 409, 410, 411, 413, 415, 422, 426,
                   500, 502, 503})
"""Every status a problem document may carry (the OpenAPI document lists them)."""


def document(status: int, slug: str, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    """The problem document; a whole token in `detail` (a path it was pasted into, repeated
    by a 404 or 405) is cut to its id (auth.tokens.hidden)."""
    if "dct_" in detail:
        from devcell.auth import tokens

        detail = tokens.hidden(detail)
    return {"type": TYPE_BASE + slug, "title": title, "status": status,
            "detail": printable(detail), **extra}


def of_error(exc: BaseException) -> dict[str, Any]:
    """The problem document for any exception (a DevCell error, an HTTP problem, a bug)."""
    if isinstance(exc, HttpProblem):
        return document(exc.status, exc.slug, exc.title, exc.detail)
    for cls, status, slug, title in _CLASSES:
        if isinstance(exc, cls):
            extra: dict[str, Any] = {}
            if isinstance(exc, errors.ManifestError):
                extra["problems"] = [located(p) for p in exc.problems]
            return document(status, slug, title, str(exc), **extra)
    if isinstance(exc, errors.DevCellError):
        return document(500, "failed", "The request failed", str(exc))
    return document(500, "internal", "Internal error",
                    "the server failed to answer this request; its log says why")


def located(p: errors.Problem) -> dict[str, Any]:
    """One of a manifest's problems, as `apply -f` locates it (user strings escaped)."""
    found: dict[str, Any] = {"file": printable(p.file), "message": printable(p.message)}
    for key in ("line", "column"):
        if getattr(p, key) is not None:
            found[key] = getattr(p, key)
    for key in ("kind", "name", "field"):
        if getattr(p, key):
            found[key] = printable(getattr(p, key))
    return found
