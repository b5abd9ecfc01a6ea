"""Which Docker engine the container backend talks to, and what to say when it is not there.

A leaf, read by both ways of reaching the engine: its socket with the standard library
(`observe`) and the SDK (`sdk`).
"""

from __future__ import annotations

import os

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
HOW_TO_START = ("start it with `scripts/docker-setup` (as root), `systemctl start docker`, or "
                "`dockerd --bridge=none --iptables=false &`; or set DOCKER_HOST to a running "
                "engine")


def engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
