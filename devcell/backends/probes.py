"""Readiness checks (`services[].ready`) as the cell's supervisor runs them, inside the cell.

A check runs where its service runs, as the kubelet runs a probe beside its container: a
command through the cell's shell, or a TCP connection or HTTP GET to the cell's own loopback
(cells often have no network, and a port the service binds on 127.0.0.1 only is still
checked). TCP and HTTP use what the image has: `nc` (busybox's will do), `curl`, or bash's
/dev/tcp; an image with none of them cannot be checked, and the state file says so. The
rules are Kubernetes': the first check after `initialDelaySeconds`, then one every
`periodSeconds`, each within `timeoutSeconds`; Ready after `successThreshold` passes in a
row, not Ready after `failureThreshold` failures in a row. The result goes to the service's
state file (`NAME.ready`), which the host reads when it observes the cell.
"""

from __future__ import annotations

import shlex
from typing import Any

DEFAULTS = {"initialDelaySeconds": 0, "periodSeconds": 10, "timeoutSeconds": 1,
            "successThreshold": 1, "failureThreshold": 3}
"""Kubernetes' defaults for a probe's timing fields."""
NO_TOOL = 125
"""A check's status when the image has no program that can make it."""

_HELPERS = """within() {
    # within SECONDS CMD...: CMD's status, or 124 when it ran past SECONDS (then killed).
    t=$1
    shift
    "$@" &
    p=$!
    ( sleep "$t"; kill -9 "$p" 2>/dev/null ) &
    w=$!
    wait "$p"
    rc=$?
    kill "$w" 2>/dev/null
    return "$rc"
}
tcp_ok() {
    if command -v nc >/dev/null 2>&1; then
        nc -w "$2" 127.0.0.1 "$1" </dev/null >/dev/null 2>&1
    elif command -v bash >/dev/null 2>&1; then
        bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
    else
        return 125
    fi
}
http_ok() {
    if command -v curl >/dev/null 2>&1; then
        curl -fsS -o /dev/null -m "$3" "http://127.0.0.1:$1$2" 2>/dev/null
    elif command -v nc >/dev/null 2>&1; then
        line=$(printf 'GET %s HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' "$2" \\
               | nc -w "$3" 127.0.0.1 "$1" 2>/dev/null | head -n 1)
        case $line in
            HTTP/*" "[23][0-9][0-9]*) return 0 ;;
        esac
        return 1
    else
        return 125
    fi
}
watch_ready() {
    # watch_ready NAME INDEX INITIAL PERIOD TIMEOUT SUCCESS FAILURE: the service's readiness,
    # checked until the service exits (its supervisor then kills this loop).
    name=$1 index=$2 initial=$3 period=$4 limit=$5 need=$6 allow=$7
    ok=0 bad=0 ready=false
    put "$name.ready" ready=false ok=0 failed=0 last=
    [ "$initial" -gt 0 ] && sleep "$initial"
    while :; do
        within "$limit" "probe_$index" "$limit"
        rc=$?
        if [ "$rc" -eq 0 ]; then
            ok=$((ok + 1)) bad=0
        else
            bad=$((bad + 1)) ok=0
        fi
        [ "$ok" -ge "$need" ] && ready=true
        [ "$bad" -ge "$allow" ] && ready=false
        put "$name.ready" ready=$ready ok=$ok failed=$bad last=$rc at=$(date +%s)
        sleep "$period"
    done
}
"""


def timing(ready: dict[str, Any]) -> dict[str, int]:
    """The check's timing fields, Kubernetes' defaults where the spec says nothing."""
    return {key: int(ready.get(key, default)) for key, default in DEFAULTS.items()}


def _check(ready: dict[str, Any]) -> str:
    """The shell command that makes one check; "$1" is its time limit in seconds."""
    if "exec" in ready:
        return " ".join(shlex.quote(a) for a in ready["exec"]["command"])
    if "tcpSocket" in ready:
        return f"tcp_ok {int(ready['tcpSocket']['port'])} \"$1\""
    http = ready["httpGet"]
    return f"http_ok {int(http['port'])} {shlex.quote(str(http.get('path') or '/'))} \"$1\""


def render(services: list[dict[str, Any]]) -> str:
    """The shell functions the supervisor's readiness checks need (none without checks)."""
    checks = [(i, s["ready"]) for i, s in enumerate(services) if s.get("ready")]
    if not checks:
        return ""
    lines = [_HELPERS]
    lines += [f"probe_{i}() {{ {_check(ready)}; }}\n" for i, ready in checks]
    return "".join(lines)


def arguments(index: int, service: dict[str, Any]) -> str:
    """watch_ready's arguments after the service's name ("" without a check)."""
    ready = service.get("ready")
    if not ready:
        return ""
    t = timing(ready)
    return (f"{index} {t['initialDelaySeconds']} {t['periodSeconds']} {t['timeoutSeconds']} "
            f"{t['successThreshold']} {t['failureThreshold']}")


def describe(ready: dict[str, Any]) -> str:
    """The check in words (`describe`, messages)."""
    if "exec" in ready:
        return "command " + " ".join(ready["exec"]["command"])
    if "tcpSocket" in ready:
        return f"tcp 127.0.0.1:{ready['tcpSocket']['port']}"
    http = ready["httpGet"]
    return f"http GET 127.0.0.1:{http['port']}{http.get('path') or '/'}"
