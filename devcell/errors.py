"""One error tree for the whole package.

The CLI turns any DevCellError into one clear message and an exit code; anything else is a
bug and keeps its traceback.
"""

from __future__ import annotations

import collections


class DevCellError(Exception):
    """Base of every error DevCell raises on purpose."""

    exit_code = 1
    permanent = False
    """Retrying cannot help until the desired state changes: a reconcile that fails with it
    is terminal (recorded, not retried with backoff). Otherwise the error is temporary."""


TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    from typing import NamedTuple

    class _ProblemFields(NamedTuple):
        file: str
        message: str
        line: int | None = None
        column: int | None = None
        kind: str | None = None
        name: str | None = None
        field: str | None = None
else:  # the same tuple, built without typing's NamedTuple machinery
    _ProblemFields = collections.namedtuple(
        "_ProblemFields", ["file", "message", "line", "column", "kind", "name", "field"],
        defaults=(None, None, None, None, None))


class Problem(_ProblemFields):
    """One thing wrong with the input, located as precisely as we know it.

    A named tuple rather than a dataclass: errors load on every command, and dataclasses
    pulls in `inspect` (several ms of start-up for `devcell get`).
    """

    __slots__ = ()

    def __str__(self) -> str:
        """One line, whatever the input held: every part is user-controlled (a file name, a
        key quoted in the field path, a value quoted in the message), so each is escaped."""
        from devcell.names import printable

        where = printable(self.file)
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        parts = [where]
        if self.kind and self.name:
            parts.append(f'{printable(self.kind)} "{printable(self.name)}"')
        elif self.kind:
            parts.append(printable(self.kind))
        if self.field:
            parts.append(printable(self.field))
        parts.append(printable(self.message))
        return ": ".join(parts)


class ManifestError(DevCellError):
    """Input that cannot be accepted; carries every problem found, not just the first."""

    permanent = True

    def __init__(self, problems: list[Problem] | None = None) -> None:
        self.problems = list(problems or [])
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


class ConfigError(ManifestError):
    """DevCell's configuration file cannot be used: nothing is applied until it is fixed."""


class UsageError(DevCellError):
    """The command line itself is wrong."""

    exit_code = 2


class SelectorError(UsageError):
    """A label or field selector that cannot be parsed (or names an unsupported field)."""


class TemplateError(UsageError):
    """An output template (-o jsonpath, custom-columns, --sort-by) that cannot be parsed."""


class TemplateEvaluationError(DevCellError):
    """A well-formed output template that the objects cannot answer (an index out of range)."""


class Unauthenticated(DevCellError):
    """A token that does not name a valid principal: malformed, unknown, expired or revoked.

    One message for every cause, so a caller learns nothing that helps guess a token (which
    part was wrong, whether an id exists). Permanent: the same token never becomes valid.
    """

    permanent = True

    def __init__(self, message: str = "the token is not valid (unknown, expired or revoked)"
                 ) -> None:
        super().__init__(message)


class Forbidden(DevCellError):
    """An authenticated principal asked for what its role or ownership does not allow.

    `rule` is the name of the policy rule that refused (devcell.auth.policy), and the message
    says it too: every refusal names its rule. Permanent: only another role, the cell's
    owner sharing it (spec.sharedWith) or an admin's hand helps.
    """

    permanent = True

    def __init__(self, message: str, *, rule: str) -> None:
        super().__init__(message)
        self.rule = rule

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_forbidden, (str(self), self.rule))


def _rebuild_forbidden(message: str, rule: str) -> Forbidden:
    return Forbidden(message, rule=rule)


class StateError(DevCellError):
    """The state database refused or failed an operation."""


class NotFound(StateError):
    """No object with that name or id."""


class Conflict(StateError):
    """A write based on a stale resourceVersion, or a name already taken."""


class VersionGone(StateError):
    """A resourceVersion older than the change log keeps (store/changes.py): what changed
    since cannot be told exactly; list again (HTTP 410 Gone, as Kubernetes)."""


class StateUnusable(StateError):
    """The state directory or its database cannot be used as it is: the disk is full, it is
    read-only, the database is damaged or not DevCell's, or it is missing while workspaces
    remain. `cause` is one of StorageError's codes; the message names the path and the fix.

    Temporary (a disk freed, a directory made writable, a database restored mends it), but no
    command can record anything meanwhile: the CLI prints it and exits 1.
    """

    def __init__(self, message: str, *, cause: str, path: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.path = path

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_state_unusable, (str(self), self.cause, self.path))


def _rebuild_state_unusable(message: str, cause: str, path: str) -> StateUnusable:
    return StateUnusable(message, cause=cause, path=path)


class BackendError(DevCellError):
    """A backend could not do what a step asked.

    `reason` is a short CamelCase cause (ImageNotFound, BackendUnavailable) that becomes the
    Ready condition's reason, so `get`/`describe` and scripts can tell causes apart.

    `permanent` (from DevCellError) says whether waiting can help, so the reconcile engine
    decides retry or terminal from the class, never from the message. False here: a failure
    nobody classified is retried with backoff (as controller-runtime treats an ordinary
    error), because wrongly giving up leaves a cell broken until someone notices, while
    wrongly retrying costs one backend call per backoff period. A subclass that waiting
    cannot mend sets it True: the failure is recorded and not retried until the desired state
    (or the world, by a hand outside DevCell) changes.
    """

    reason: str | None = None

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class BackendUnavailable(BackendError):
    """The backend's engine cannot be reached.

    Temporary: an engine restarting, or started after DevCell was, comes back by itself.
    """

    reason = "BackendUnavailable"


class UnknownBackend(BackendUnavailable):
    """No backend of that name in this version of DevCell (a planned one, or a typo).

    Permanent, unlike its parent: only a spec naming another backend, or another version of
    DevCell, helps. Its reason stays BackendUnavailable, which is what the cell shows.
    """

    permanent = True


class BackendNotFound(BackendError):
    """The backend has no such resource (makes idempotent deletes easy).

    Temporary: the resource went away between observing and acting (a delete racing this
    step, a `docker rm` by hand); the next decision observes that and plans to make it.
    """



class ImageNotFound(BackendNotFound):
    """The cell's image is not on the engine and DevCell may not pull it
    (`spec.imagePullPolicy: Never`), or it vanished between the pull and the create.

    Permanent: with pulls forbidden, no amount of waiting makes an image appear. The fix is a
    user's act, named in the message (`devcell image build-base`, `docker load`, another
    pull policy or image); a re-apply or the daemon's resync then tries again.
    """

    reason = "ImageNotFound"
    permanent = True


class ImagePullFailed(BackendError):
    """The engine could not pull the cell's image from its registry.

    `cause` says why, in one of PULL_CAUSES: the image or tag does not exist (`not-found`),
    the registry refused the credentials or asked for some (`unauthorized`), the registry
    could not be reached (`unreachable`), or anything else the engine said (`failed`). The
    message names the fix for each.

    Temporary, as Kubernetes' ImagePullBackOff is: an image gets pushed, a login is done, a
    registry comes back, all without any change to the cell; the daemon retries with backoff
    and an inline apply reports the failure at once.
    """

    reason = "ImagePullFailed"

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_pull_failed, (str(self), self.cause))


PULL_CAUSES = ("not-found", "unauthorized", "unreachable", "failed")


def _rebuild_pull_failed(message: str, cause: str) -> ImagePullFailed:
    return ImagePullFailed(message, cause=cause)


class BackendConflict(BackendError):
    """The backend already holds something by that name or in that state (HTTP 409).

    Temporary: a conflict is a race (another worker or process created, removed or paused
    the same resource a moment ago); the next decision observes the winner and plans from
    there. Callers that expect a conflict (create of a name already taken) catch this class.
    """



class BackendRefused(BackendError):
    """The request cannot succeed as asked: a DevCell rule refuses it (security, ids), a
    resource in the way is not DevCell's to touch, or the engine rejects the arguments
    (HTTP 400).

    Permanent: only a change of spec, of DevCell's configuration, or a hand on the engine
    makes it succeed; the message says which.
    """

    permanent = True


class ArchiveRefused(BackendRefused):
    """A snapshot archive that import will not bring in: damaged, truncated, altered since it
    was written (its checksum does not match), of a format version this DevCell does not know,
    or holding a member that could write outside its destination (see docs/security.md).

    Permanent: only another archive helps. Nothing was written when it is raised.
    """

    reason = "ArchiveRefused"
    permanent = True


class RegistryUnreachable(BackendError):
    """A registry a snapshot is pushed to or pulled from could not be reached, answered an
    error, or refused the credentials of the Docker client's configuration. Nothing was
    recorded; the same command may succeed once the registry or the login is mended."""

    reason = "RegistryUnreachable"


class MountRefused(BackendRefused):
    """A bind mount's host path is not allowed (any more) when the container starts, or
    overlaps a writable mount of another cell.

    Permanent: the host path, the configuration or the other cell must change first.
    """

    reason = "MountRefused"
    permanent = True


class ImageBuildFailed(BackendError):
    """The engine could not build the cell's image from its Dockerfile (spec.build), or its
    context could not be read.

    The message names the failing step and ends with the tail of its output (escaped where
    it is shown). Permanent: the same context builds the same way, so only a change to it
    (which a re-apply finds by its digest) or to the spec is worth another build; the
    daemon's periodic resync also tries again.
    """

    reason = "ImageBuildFailed"
    permanent = True


class HookFailed(BackendError):
    """A hook of the cell (a program the cell's author wrote) exited non-zero or ran past its
    time limit. `output` is the tail of what it printed, secrets redacted; `code` its exit
    status (None: it was killed at its time limit)."""

    reason = "HookFailed"

    def __init__(self, message: str, *, which: str, argv: list[str], code: int | None,
                 output: str) -> None:
        super().__init__(message)
        self.which, self.argv, self.code, self.output = which, argv, code, output


class CapabilityMissing(BackendError):
    """The backend cannot honestly do this.

    Permanent: capabilities are fixed per backend; only a spec naming another backend helps.
    """

    reason = "CapabilityMissing"
    permanent = True


class TemporaryError(DevCellError):
    """Worth retrying after `delay` seconds."""

    def __init__(self, message: str, *, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(DevCellError):
    """Record it and stop retrying until the desired state changes."""

    permanent = True


def retry_delay(exc: BaseException) -> float | None:
    """How soon an operation that failed with `exc` is worth retrying: None when never (until
    the desired state changes), 0.0 when the queue's backoff decides, else the error's own
    delay (TemporaryError)."""
    if getattr(exc, "permanent", False):
        return None
    return exc.delay if isinstance(exc, TemporaryError) else 0.0


def condition_reason(exc: BaseException, default: str = "StepFailed") -> str:
    """The one-word cause recorded on the operation and the Ready condition: from the error's
    class (BackendError.reason), never from its text."""
    reason = exc.reason if isinstance(exc, BackendError) else None
    return reason or default


class StorageError(DevCellError):
    """A run snapshot store could not save, load or delete: `code` says why, `path` where.

    `path` is a file path, or `<database path>#<run id>` for a row of the SQLite store;
    `reason` is specific ("checksum mismatch: ...", "No space left on device", ...).
    The codes are the class attributes below; callers compare `exc.code` with them.
    """

    CORRUPT_SNAPSHOT = "CORRUPT_SNAPSHOT"  # stored bytes fail a load check: never handed back
    INVALID_SNAPSHOT = "INVALID_SNAPSHOT"  # refused on save: it could not be read back
    INVALID_RUN_ID = "INVALID_RUN_ID"  # empty, too long, or could escape the store
    PERMISSION_DENIED = "PERMISSION_DENIED"  # EACCES, EPERM
    DISK_FULL = "DISK_FULL"  # ENOSPC, EDQUOT, SQLITE_FULL
    READ_ONLY = "READ_ONLY"  # EROFS, SQLITE_READONLY
    UNSAFE_PATH = "UNSAFE_PATH"  # a symbolic link where the store expects its own entry
    CORRUPT_DATABASE = "CORRUPT_DATABASE"  # the SQLite file itself is damaged
    BUSY = "BUSY"  # another writer held the database past the busy timeout
    IO_ERROR = "IO_ERROR"  # any other operating system or database failure

    CODES = frozenset({
        CORRUPT_SNAPSHOT, INVALID_SNAPSHOT, INVALID_RUN_ID, PERMISSION_DENIED, DISK_FULL,
        READ_ONLY, UNSAFE_PATH, CORRUPT_DATABASE, BUSY, IO_ERROR,
    })

    def __init__(self, *, code: str, path: str, reason: str) -> None:
        if code not in self.CODES:
            raise ValueError(f"unknown StorageError code {code!r}")
        super().__init__(f"{path}: {reason} ({code})")
        self.code = code
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only __init__: rebuild explicitly so the error survives pickling
        # (multiprocessing, concurrent.futures).
        return (_rebuild_storage_error, (type(self), self.code, self.path, self.reason))


def _rebuild_storage_error(cls: type[StorageError], code: str, path: str, reason: str
                           ) -> StorageError:
    return cls(code=code, path=path, reason=reason)


class FieldNotFound(DevCellError):
    """`devcell explain` was asked for a field its kind's schema does not have (kubectl:
    `field "x" does not exist`); the message names the path and the fields there are."""
