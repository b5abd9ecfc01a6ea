"""DevCell's own scripts run on one node of the cluster, as swarm jobs (docs/cluster.md).

A workspace and its checkpoints live on the node that made them; the manager never reads that
disk. What must touch them (freeze a cell's processes, copy a workspace into a checkpoint,
fill a fork's workspace from one, empty a checkpoint) is a `replicated-job` of one task
constrained to that node's id, made through the manager's engine, from the node tools image
(`devcell/nodetools:2`: busybox, GNU cp, GNU tar and curl, base_image.node_tools_tar), with every
capability dropped but the few its step names, a read-only root filesystem, and only the
volumes (or the one cgroup directory) its step needs mounted. The job's output is read back
through the manager (`service logs`), then the job removed.

Why jobs and not a DevCell service on each node: a job holds its privileges only while its
step runs, mounts only what that step touches, and needs nothing installed on the node but
the image (facts: jobs run to completion, their logs are readable, a bind source missing on
the node rejects the task, which is how a cgroup path that is not there is told apart).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

from devcell.backends.container.base_image import NODE_TOOLS_IMAGE, TOOLS_DIR
from devcell.backends.container.cluster import Manager
from devcell.backends.container.labels import MANAGED, STATE
from devcell.errors import BackendError, BackendNotFound
from devcell.log import logger

JOB = "dev.devcell.job"
"""On a node job's service: what it does and to what (`checkpoint:<id>`, `fill:<volume>`)."""
FAILED = ("failed", "rejected", "orphaned")
POLL_S = 0.1
PENDING_S = 60.0
"""How long a job may wait unplaced (its node paused or its resources taken) before it is
given up: the node that holds the workspace is the only one it can run on."""
LOGS_S = 5.0
MISSING_SOURCE = "bind source path does not exist"
"""What the node's engine says of a bind mount whose source is not on the node (facts)."""
TOOLS = f"/{TOOLS_DIR}"
CP = f"{TOOLS}/cp"
TREE_FIGURES = (
    'files=$(find "$1" ! -type d -exec sh -c \'echo $#\' x {} + |'
    ' awk \'{n += $1} END {printf "%.0f", n}\')\n'
    'bytes=$(find "$1" -type f -exec stat -c %s {} + | awk \'{n += $1} END {printf "%.0f", n}\')\n'
    'echo "devcell-tree files=$files bytes=$bytes"\n')
"""The body of a shell function printing the tree at $1's file count and bytes."""
ENV = [f"LD_LIBRARY_PATH=/{TOOLS_DIR}", "PATH=/bin"]


class SourceMissing(BackendError):
    """The job's bind source is not on the node (its task was rejected before it ran)."""


def node_ready(manager: Manager, node: str, what: str) -> None:
    """Refuse to start a job on a node the cluster has lost (it would wait, pending, for it)."""
    try:
        found = manager.node(node)
    except BackendNotFound:
        raise BackendNotFound(f"{what}: node {node} is no longer in the swarm") from None
    status = found.get("Status") or {}
    if status.get("State") != "ready":
        why = str(status.get("Message") or "").strip()
        raise BackendError(f"{what}: node {node} is {status.get('State')}"
                           + (f" ({why[:200]})" if why else "")
                           + "; it holds the workspace, so this waits for it")
    availability = (found.get("Spec") or {}).get("Availability")
    if availability in ("pause", "drain"):
        verb = "cordoned" if availability == "pause" else "drained"
        raise BackendError(f"{what}: node {node} is {verb} (availability {availability}): the "
                           "swarm starts no task there, and the job must run where the "
                           f"workspace is; `devcell node uncordon {node}` lets it run")


def run(manager: Manager, owner: str, *, node: str, job: str, what: str, script: str,
        mounts: list[dict[str, Any]], caps: tuple[str, ...] = (),
        timeout: float = 3600.0, expect: str | None = None) -> str:
    """Run `script` (busybox sh) on `node` as a job labelled `job`; its output once it
    completed (read again for up to LOGS_S until it holds `expect`: the manager gathers a
    task's logs from its node, and may not have them all the moment the task completes).
    BackendError with the job's words when it fails; SourceMissing when a bind mount's
    source is not on the node. A job of the same label left by a crash is removed first;
    this one is removed after, whatever happened."""
    return run_placed(manager, owner, constraints=[f"node.id=={node}"], job=job, what=what,
                      script=script, mounts=mounts, caps=caps, timeout=timeout,
                      expect=expect, where=f"node {node}")[1]


def run_placed(manager: Manager, owner: str, *, constraints: list[str], job: str, what: str,
               script: str, mounts: list[dict[str, Any]], caps: tuple[str, ...] = (),
               timeout: float = 3600.0, expect: str | None = None,
               reservations: dict[str, Any] | None = None, env: dict[str, str] | None = None,
               networks: list[dict[str, Any]] | None = None, where: str = "a node",
               on_placed: Callable[[str], None] | None = None) -> tuple[str, str]:
    """`run`, on whichever node the swarm picks under `constraints` (and with room for
    `reservations`): (that node's id, the job's output). `on_placed(node)` is called once
    the swarm assigned its task, before it runs (so what it will make there is recorded
    first)."""
    labels = {MANAGED: "true", STATE: owner, JOB: job}
    for old in manager.services(labels):
        manager.remove_service(str(old["ID"]), f"removing an earlier job {job}")
    tag = hashlib.sha256(f"{owner}/{job}".encode()).hexdigest()[:16]
    name = f"devcell-{job.partition(':')[0]}-{tag}"
    template: dict[str, Any] = {
        "ContainerSpec": {
            "Image": NODE_TOOLS_IMAGE, "Labels": labels,
            "Env": ENV + [f"{k}={v}" for k, v in sorted((env or {}).items())],
            "Command": ["/bin/sh", "-c", "set -eu\n" + script],
            "Mounts": mounts, "ReadOnly": True,
            "CapabilityDrop": ["ALL"],
            "CapabilityAdd": [f"CAP_{c}" for c in caps],
        },
        "Placement": {"Constraints": constraints},
        "RestartPolicy": {"Condition": "none"},
        "Resources": {"Limits": {"Pids": 256}, "Reservations": reservations or {}},
    }
    if networks:
        template["Networks"] = networks
    spec = {"Name": name, "Labels": labels, "TaskTemplate": template,
            "Mode": {"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}}}
    began = time.monotonic()
    service = manager.create_service(spec, f"{what}: starting its job on {where}")
    placed = ""
    try:
        while True:
            tasks = manager.tasks_of([service])
            states = [str((t.get("Status") or {}).get("State")) for t in tasks]
            assigned = next((str(t.get("NodeID")) for t in tasks if t.get("NodeID")), "")
            if assigned and not placed:
                placed = assigned
                where = f"node {assigned}"
                if on_placed is not None:
                    on_placed(assigned)
            if "complete" in states:
                out = manager.logs(service, f"{what}: reading its job's output")
                read = time.monotonic()
                while expect is not None and expect not in out and \
                        time.monotonic() - read < LOGS_S:
                    time.sleep(POLL_S)
                    out = manager.logs(service, f"{what}: reading its job's output")
                logger.bind(backend="container").debug(
                    "job {} on {}: {:.2f} s", job, where, time.monotonic() - began)
                return placed, out
            failed = [t for t in tasks if (t.get("Status") or {}).get("State") in FAILED]
            if failed:
                status = failed[0].get("Status") or {}
                err = str(status.get("Err") or status.get("Message") or "")
                if MISSING_SOURCE in err:
                    raise SourceMissing(f"{what} on {where}: {err[:300]}")
                said = manager.logs(service, f"{what}: reading its job's output").strip()
                raise BackendError(f"{what} on {where} failed: {err[:300]}"
                                   + (f": {said[-500:]}" if said else ""))
            waited = time.monotonic() - began
            if waited > timeout or (waited > PENDING_S and set(states) <= {"pending", "new"}):
                why = next((str((t.get("Status") or {}).get("Err") or "")
                            for t in tasks if (t.get("Status") or {}).get("Err")), "")
                raise BackendError(f"{what} on {where}: its job did not complete within "
                                   f"{waited:.0f} s ({', '.join(states) or 'no task'}"
                                   + (f": {why[:200]}" if why else "") + ")")
            time.sleep(POLL_S)
    finally:
        manager.remove_service(service, f"removing job {job}")


def outputs(text: str, prefix: str) -> dict[str, str]:
    """The `KEY=VALUE` words of the job's line that starts with `prefix` (its last)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith(prefix + " "):
            found = dict(w.partition("=")[::2] for w in line.split()[1:] if "=" in w)
    return found
