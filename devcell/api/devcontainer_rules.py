"""Two judgements of `import devcontainer` that its Docker Compose half makes too: whether
a variable's name says it holds a credential, and whether a bind mount's source hands the
host over to the cell."""

from __future__ import annotations

import contextlib
import os
import re
import stat

_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL",
                 "APIKEY", "PRIVATE", "COOKIE")
_SECRET_PARTS = {"KEY", "PASS", "PWD", "AUTH", "CREDS", "PAT", "SIGNATURE", "SALT", "CERT"}
_NOT_SECRET_SUFFIXES = {"PATH", "DIR", "FILE", "HOME", "URL", "URI", "HOST", "PORT", "NAME",
                        "ID", "TYPE", "REGION", "USER", "USERNAME", "ENDPOINT", "LOCATION"}
_ENGINE_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
                   "/var/run/containerd/containerd.sock", "/run/podman/podman.sock",
                   "/run/crio/crio.sock", "/var/lib/docker", "/var/lib/containerd")


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (GITHUB_TOKEN,
    DB_PASSWORD, AWS_SECRET_ACCESS_KEY, API_KEY), unless it names where one is kept
    (SSH_KEY_PATH, TOKEN_FILE, KEY_ID): such a value is imported as `secret: true`."""
    upper = name.upper()
    words = [w for w in re.split(r"[^A-Z0-9]+", upper) if w]
    if not words or words[-1] in _NOT_SECRET_SUFFIXES or upper == "PWD":
        return False
    return any(w in upper for w in _SECRET_WORDS) or any(w in _SECRET_PARTS for w in words)


def host_takeover(source: str) -> str | None:
    """Why a bind mount of `source` would hand the host to the cell (None: it would not):
    the root directory, or a container engine's socket or state (with it, the cell starts
    containers as root on the host). Checked on the path as written and on where its links
    lead."""
    for path in dict.fromkeys((os.path.normpath(source), os.path.realpath(source))):
        if path == "/":
            return "is the host's whole filesystem"
        for sock in _ENGINE_SOCKETS:
            if path == sock or sock.startswith(path.rstrip("/") + "/"):
                return f"is or holds {sock}, the container engine's control"
        if path.endswith(".sock"):
            return "is a control socket (a service's socket lets the cell command it)"
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.stat(path).st_mode):
                return "is a socket (a service's socket lets the cell command it)"
    return None
