"""Registry images for the container backend, without the SDK: pull policy, why a pull failed
(and its fix), and the record of the images DevCell pulled.

The engine's pull answers carry no code that separates "no such image" from "no credentials"
from "registry down" (the last two are both HTTP 500), so `classify` reads the engine's
message: the one place its words are interpreted. The record (`<state>/pulled-images.json`,
0600) is how `devcell image ls|prune` tell an image DevCell pulled from one a user pulled:
an image's labels are fixed by whoever built it, so a pulled image cannot carry ours.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from devcell.errors import BackendError, ImagePullFailed

RECORD_FILE = "pulled-images.json"
RECORD_LIMIT = 4 * 2**20
"""Bytes of the record read at most: a damaged or enormous file is refused, not loaded."""


class PullPolicy(StrEnum):
    """When the cell's image is pulled (`spec.imagePullPolicy`), as Kubernetes names them."""

    IF_NOT_PRESENT = "IfNotPresent"
    """Pull only when the engine does not have the image (the default, `:latest` included)."""
    ALWAYS = "Always"
    """Ask the registry at every reconcile; pull and recreate the cell when its digest moved."""
    NEVER = "Never"
    """Never pull: the image must be on the engine already (docker load, build-base)."""


def policy_of(spec: dict[str, Any]) -> PullPolicy:
    return PullPolicy(spec.get("imagePullPolicy") or PullPolicy.IF_NOT_PRESENT)


def registry_of(image: str) -> str:
    """The registry host of an image reference, as the engine resolves it (docker.io when the
    first component is no host: it has no dot or colon and is not localhost)."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


_UNAUTHORIZED = ("no basic auth credentials", "unauthorized", "authentication required",
                 "denied", "incorrect username or password")
_UNREACHABLE = ("connection refused", "dial tcp", "no such host", "i/o timeout",
                "network is unreachable", "tls handshake timeout", "connection reset",
                "server gave http response to https client", "context deadline exceeded",
                "unexpected eof", "read timed out")
_NOT_FOUND = ("manifest unknown", "not found", "name unknown", "does not exist")


def cause_of(message: str, status: int | None) -> str:
    """One of errors.PULL_CAUSES for the engine's answer to a pull (see the module's note)."""
    text = message.lower()
    if any(word in text for word in _UNAUTHORIZED):
        return "unauthorized"
    if status == 404 or any(word in text for word in _NOT_FOUND):
        return "not-found"
    if any(word in text for word in _UNREACHABLE):
        return "unreachable"
    return "failed"


def pull_failed(image: str, message: str, status: int | None) -> ImagePullFailed:
    """The error a failed pull of `image` raises: its cause in words and the fix for it."""
    cause = cause_of(message, status)
    registry = registry_of(image)
    first = message.strip().splitlines()[0][:300] if message.strip() else "no answer"
    fix = {
        "not-found": f"the registry {registry} has no such image or tag; check the name and "
                     "tag in spec.image, or push the image",
        "unauthorized": f"the registry {registry} refused the credentials or needs some; run "
                        f"`docker login {registry}` as the user DevCell runs as (DevCell pulls "
                        "with the engine client's credentials: DOCKER_CONFIG or "
                        "~/.docker/config.json, credential helpers included)",
        "unreachable": f"the registry {registry} cannot be reached; check that it is up and "
                       "reachable from this machine (the daemon retries with backoff)",
        "failed": "see the engine's message; the daemon retries with backoff",
    }[cause]
    return ImagePullFailed(f"pulling image {image} failed ({cause}): {first}; {fix}",
                           cause=cause)


@dataclass
class PulledImage:
    """One image DevCell pulled: the reference asked for and the image it got."""

    image: str
    id: str
    digest: str | None
    pulledAt: str  # noqa: N815 - the record's JSON field, as status fields are spelled
    cells: list[str] = field(default_factory=list)
    """Names of the cells whose pulls fetched it (most recent last)."""
    replaced: list[str] = field(default_factory=list)
    """Ids of images DevCell pulled earlier under this reference (a digest that moved):
    untagged since, and removed by `devcell image prune` once nothing uses them."""


class PullRecord:
    """`<state>/pulled-images.json`: what this state directory's pulls fetched, by reference.

    Written whole (a temporary file renamed over it, 0600) under an exclusive lock on a
    sibling lock file, so parallel workers and processes never lose each other's entries.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / RECORD_FILE
        self._lock_path = state_dir / (RECORD_FILE + ".lock")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def load(self) -> dict[str, PulledImage]:
        """The entries, or BackendError naming the file and the fix when it cannot be used
        (a link, not a regular file, too large, not the record's JSON)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise self._unusable(exc.strerror or str(exc)) from None
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise self._unusable("not a regular file")
            raw = f.read(RECORD_LIMIT + 1)
        if len(raw) > RECORD_LIMIT:
            raise self._unusable(f"larger than {RECORD_LIMIT} bytes")
        try:
            data = json.loads(raw or b"{}")
            known = set(PulledImage.__dataclass_fields__)
            return {e["image"]: PulledImage(**{k: v for k, v in e.items() if k in known})
                    for e in data["images"]}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise self._unusable(f"not a pull record ({type(exc).__name__})") from None

    def _unusable(self, why: str) -> BackendError:
        return BackendError(f"{self.path}: the record of the images DevCell pulled cannot be "
                            f"read: {why}; move it aside to start a new one (the images it "
                            "named are then no longer listed or pruned by DevCell)")

    def _save(self, entries: dict[str, PulledImage]) -> None:
        body = json.dumps({"version": 1, "images": [asdict(e) for e in entries.values()]},
                          indent=1, sort_keys=True).encode()
        tmp = self.path.with_name(f".{RECORD_FILE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def add(self, entry: PulledImage) -> None:
        with self._locked():
            entries = self.load()
            old = entries.get(entry.image)
            if old is not None:
                entry.cells = [c for c in old.cells if c not in entry.cells] + entry.cells
                earlier = [*old.replaced, old.id]
                entry.replaced = list(dict.fromkeys(i for i in earlier if i != entry.id))
            entries[entry.image] = entry
            self._save(entries)

    def update(self, entry: PulledImage | None, image: str) -> None:
        """Replace the entry of `image` (None: forget it), keeping every other entry."""
        with self._locked():
            entries = self.load()
            if entry is None:
                entries.pop(image, None)
            else:
                entries[image] = entry
            self._save(entries)

