"""The dashboard's sign-in sessions over TCP, kept in the server's memory only.

Signing in presents a token once (a form's POST body, never a URL); the browser gets an
opaque random session id in a cookie (HttpOnly, Secure, SameSite=Strict, `__Host-`: no
script reads it, no other site sends it, no subdomain sets it), and the token stays here.
Every request checks the session's token again (auth.tokens), so a revoked or expired token
ends its sessions at their next request; a daemon restart ends them all. Each session has
its own CSRF token, which every form carries and every POST must present.

Sessions are looked up by the SHA-256 of their id (a timing difference says nothing about an
id), bounded in number (the oldest goes first) and in time (idle and absolute).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

COOKIE = "__Host-devcell-session"
MAX_SESSIONS = 1024
IDLE_SECONDS = 8 * 3600
MAX_SECONDS = 24 * 3600


@dataclass
class Session:
    token: str
    """Kept here only: checked again on every request (revocation ends the session)."""
    csrf: str
    created: float
    used: float


def _key(sid: str) -> str:
    return hashlib.sha256(sid.encode("utf-8", "replace")).hexdigest()


class Sessions:
    """The sessions of one server."""

    def __init__(self) -> None:
        self._by_key: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.anonymous_csrf = secrets.token_urlsafe(32)
        """The CSRF token of the sign-in form and of the unix socket's admin (no session)."""

    def open(self, token: str) -> tuple[str, Session]:
        sid = secrets.token_urlsafe(32)
        now = time.monotonic()
        found = Session(token, secrets.token_urlsafe(32), now, now)
        with self._lock:
            self._expire(now)
            while len(self._by_key) >= MAX_SESSIONS:
                del self._by_key[next(iter(self._by_key))]  # the oldest
            self._by_key[_key(sid)] = found
        return sid, found

    def find(self, sid: str | None) -> Session | None:
        if not sid or len(sid) > 256:
            return None
        now = time.monotonic()
        with self._lock:
            found = self._by_key.get(_key(sid))
            if found is None:
                return None
            if now - found.used > IDLE_SECONDS or now - found.created > MAX_SECONDS:
                del self._by_key[_key(sid)]
                return None
            found.used = now
            return found

    def close(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._by_key.pop(_key(sid), None)

    def _expire(self, now: float) -> None:
        for key, s in list(self._by_key.items()):
            if now - s.used > IDLE_SECONDS or now - s.created > MAX_SECONDS:
                del self._by_key[key]


class Throttle:
    """Failed sign-ins: at most `limit` within `window` seconds for the whole server, then each
    further attempt is refused unchecked until the window moves on (a token cannot be guessed,
    but a flood of guesses should cost nothing: each check reads the database)."""

    def __init__(self, limit: int = 20, window: float = 60.0) -> None:
        self.limit, self.window = limit, window
        self._failures: list[float] = []
        self._lock = threading.Lock()

    def _recent(self, now: float) -> list[float]:
        self._failures = [t for t in self._failures if now - t < self.window]
        return self._failures

    def allowed(self, now: float | None = None) -> bool:
        with self._lock:
            return len(self._recent(time.monotonic() if now is None else now)) < self.limit

    def failed(self, now: float | None = None) -> None:
        with self._lock:
            now = time.monotonic() if now is None else now
            self._recent(now).append(now)


def same(given: str | None, wanted: str) -> bool:
    """A CSRF token check in constant time."""
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"),
                                                     wanted.encode())
