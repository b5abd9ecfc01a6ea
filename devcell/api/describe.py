"""`describe`: one object in detail, with its lineage, operations (and their steps) and events.

Below the command line so that the HTTP API answers the same text (GET .../NAME/describe,
`devcell --server URL describe`): `text()` is what `object()` and `operation()` print, each
line written to the stream `writing()` gives (the process's stdout when none is).
"""

from __future__ import annotations

import contextvars
import io
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from devcell.api import render
from devcell.errors import NotFound
from devcell.names import printable
from devcell.store import events, holds, objects, operations, views

CONSISTENCY_MEANING = {
    "metadata": "control-plane record only; no files or memory were preserved",
    "filesystem": "workspace files, taken with services quiesced; processes and memory not kept",
    "machine": "disk and memory; processes resume where they were",
}


_OUT: contextvars.ContextVar[TextIO | None] = contextvars.ContextVar("describe_out",
                                                                   default=None)


def _out() -> TextIO:
    return _OUT.get() or sys.stdout


def text(conn: sqlite3.Connection, kind: str, ref: str, state_dir: Path | None = None) -> str:
    """What `devcell describe KIND REF` prints of one object (Operation: an operation by id),
    as a string; NotFound when it is not recorded."""
    buf = io.StringIO()
    token = _OUT.set(buf)
    try:
        if kind == "Operation":
            operation(conn, ref)
        else:
            object(conn, kind, ref, state_dir)
    finally:
        _OUT.reset(token)
    return buf.getvalue()


def _field(label: str, value: Any, indent: int = 0) -> None:
    """One `Label: value` line; the value escaped (names.printable), as in every table."""
    shown = "<none>" if value in (None, "", [], {}) else printable(str(value))
    _out().write(f"{' ' * indent}{label + ':':<20}{shown}\n")


def _privileges(asked: dict[str, Any]) -> str:
    """What spec.security grants beyond DevCell's defaults, in one line (init: true grants
    nothing: every cell has it)."""
    parts = [f"{label} {', '.join(asked[key])}"
             for key, label in (("capabilities", "capabilities"),
                                ("securityOpt", "security options"), ("devices", "devices"))
             if asked.get(key)]
    if asked.get("privileged"):
        parts.insert(0, "privileged")
    return "; ".join(parts) or "the defaults"


def _conditions(status: dict[str, Any]) -> None:
    conds = status.get("conditions", [])
    _out().write("Conditions:\n")
    if not conds:
        _out().write("  <none>\n")
        return
    rows = [[c["type"], c["status"], c.get("reason", ""), c.get("lastTransitionTime", ""),
             c.get("message", "")] for c in conds]
    _indented_table(["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"], rows)


def _post_create(result: dict[str, Any]) -> None:
    """The postCreate hooks' last result; a failure with its output's tail, line by line."""
    if not result:
        return
    if result.get("state") != "Failed":
        _field("PostCreate", f"{result.get('state')} at {result.get('at')}")
        return
    code = result.get("exitCode")
    _field("PostCreate", f"Failed at {result.get('at')}: {result.get('hook')!r} "
           + (f"exited with status {code}" if code is not None else "did not finish in time")
           + "; services held until `devcell cell rerun-hooks` succeeds")
    for line in str(result.get("output") or "").splitlines()[-20:]:
        _out().write(f"  | {printable(line)}\n")


def _indented_table(headers: list[str], rows: list[list[Any]]) -> None:
    import io

    buf = io.StringIO()
    render.table(headers, rows, out=buf)
    _out().write("".join(f"  {line}\n" for line in buf.getvalue().splitlines()))


def _operations(conn: sqlite3.Connection, object_id: str) -> None:
    ops = operations.for_object(conn, object_id, limit=5)
    _out().write("Operations (latest first):\n")
    if not ops:
        _out().write("  <none>\n")
    for op in ops:
        by = f"  by={op['actor']}" if op["actor"] else ""
        _out().write(printable(f"  {op['id']}  {op['action']}  {op['status']}  "
                                   f"trigger={op['trigger']}{by}  "
                                   f"{render.age(op['created_at'])} ago") + "\n")
        for step in operations.steps(conn, op["id"]):
            took = f"{step.duration_ms:.1f}ms" if step.duration_ms is not None else "-"
            extra = f"  error: {step.error}" if step.error else ""
            _out().write(printable(f"    {step.idx + 1}. {step.name:<16} {step.status:<10} "
                                       f"{took}{extra}") + "\n")


def _events(conn: sqlite3.Connection, object_id: str) -> None:
    rows = events.for_object(conn, object_id)
    _out().write("Events:\n")
    if not rows:
        _out().write("  <none>\n")
        return
    _indented_table(["AGE", "TYPE", "REASON", "MESSAGE"],
                    [[render.age(e["created_at"]), e["type"], e["reason"], e["message"]]
                     for e in rows])


def _workspace_storage(conn: sqlite3.Connection, object_id: str) -> str | None:
    """How the cell's workspace volume was made, from its create-volume step: an overlay on
    its snapshot's checkpoint, or a copy (and why a fork could not be an overlay)."""
    for op in operations.for_object(conn, object_id, limit=50):
        for step in operations.steps(conn, op["id"]):
            if step.name == "create-volume" and step.outputs.get("storage"):
                how = {"overlay": "overlay on its snapshot's checkpoint (its own writes only)",
                       "copy": "a copy of its own"}.get(step.outputs["storage"], "")
                why = step.outputs.get("copiedBecause")
                return how + (f" (not an overlay: {why})" if why else "")
    return None


def _workspace_host_path(conn: sqlite3.Connection, object_id: str, spec: dict[str, Any],
                         state_dir: Path | None) -> str | None:
    """Where the host sees a container cell's workspace (an editor opens it there); a vm
    cell's lives on its own disk, seen through the machine only."""
    from devcell.store import volumes

    volume = volumes.for_cell(conn, object_id)
    if volume is None or state_dir is None:
        return None
    if spec.get("backend") == "container":
        from devcell.backends.container.layout import Layout
        from devcell.backends.host import live_folder

        layout = Layout(state_dir)
        live = live_folder.recorded(live_folder.read_marker(layout.marker(volume.id)))
        if live is not None:
            return f"{printable(str(live))} (your folder, bound live: DevCell never removes it)"
        return printable(str(layout.workspace(volume.id)))
    if spec.get("backend") == "vm":
        return "on the machine's workspace disk (reach it with devcell exec or ssh)"
    return None


def _machine(conn: sqlite3.Connection, object_id: str) -> str | None:
    """A vm cell's hypervisor and how its guest runs (KVM, or TCG: emulated, slower), from its
    latest create step."""
    for op in operations.for_object(conn, object_id, limit=50):
        for step in operations.steps(conn, op["id"]):
            if step.name == "create" and step.outputs.get("accel"):
                accel = str(step.outputs["accel"])
                how = {"kvm": "KVM (hardware virtualization)",
                       "tcg": "TCG (emulated: /dev/kvm absent or not working here)"}
                machine = f"{step.outputs.get('driver')}, {how.get(accel, accel)}"
                return machine + _resumed_from(conn, object_id)
    return None


def _resumed_from(conn: sqlite3.Connection, object_id: str) -> str:
    """For a fork of a machine snapshot: that its first start resumed the snapshot's
    processes as a new machine (recorded by the start step), not a boot."""
    for op in operations.for_object(conn, object_id, limit=50):
        for step in operations.steps(conn, op["id"]):
            if step.name == "start" and step.outputs.get("resumed_from"):
                mac = step.outputs.get("mac")
                return ("; resumed from a machine snapshot as a new machine (hostname "
                        f"{step.outputs.get('hostname')}, new machine-id, "
                        + (f"MAC {mac}, " if mac else "") + "random generator reseeded)")
    return ""


def _ports(spec: dict[str, Any], cell_id: str, state_dir: Path | None) -> str | None:
    """Published ports (host -> cell) and the live `port-forward`s to the cell."""
    from devcell import security
    from devcell.store import forwards

    inner = [(int(p.get("containerPort", 0)),
              f" (sidecar {spec['sidecars'][where[1]].get('name')})"
              if where[0] == "sidecars" else "")
             for where, p in security.port_entries(spec)]
    shown = [f"{address}:{port} -> {inside} (published){whose}"
             for (address, port), (inside, whose) in zip(security.published(spec), inner,
                                                          strict=True)]
    if state_dir is not None:
        shown += [f"{f.address}:{local} -> {remote} (port-forward, pid {f.pid})"
                  for f in forwards.of_cell(state_dir, cell_id) for local, remote in f.ports]
    return ", ".join(shown) or None


def _idle(record: objects.ObjectRecord, state_dir: Path) -> str:
    """When the cell sleeps for idleness: 'idle for 12m (last: ssh session closed 10:02:00
    UTC), sleeps at 10:32:00 UTC', what keeps it awake, or never."""
    from datetime import UTC, datetime

    from devcell.controllers import idle

    seconds = idle.sleep_after(record, state_dir)
    if seconds is None:
        return "never (no spec.idle.sleepAfter, nor idle.sleepAfter in DevCell's configuration)"
    if record.phase != objects.Phase.RUNNING:
        return f"after {idle.span(seconds)} idle, while it runs ({record.phase} now)"
    judged = idle.judge(record, state_dir, now=datetime.now(UTC), sleep_after=seconds,
                        host_ports=idle.host_ports(record.spec))
    return judged.describe()


def object(conn: sqlite3.Connection, kind: str, ref: str, state_dir: Path | None = None
           ) -> None:
    record = objects.get(conn, kind, ref)
    if record is None and kind == "Snapshot":  # an expired one is still recorded as such
        from devcell.store import retention

        record = retention.expired_named(conn, ref)
    if record is None:
        record = objects.require(conn, kind, ref)  # raises NotFound
    row = objects.row(conn, kind, record.id)
    assert row is not None  # require() just found it
    doc = views.object_document(conn, kind, row)
    status = doc["status"]
    _field("Name", record.name)
    _field("Kind", kind)
    _field("ID", record.id)
    _field("Labels", ", ".join(f"{k}={v}" for k, v in record.labels.items()))
    if kind == "Cell":
        _field("Owner", record.extra.get("owner"))
        _field("Shared with", ", ".join(str(u) for u in record.spec.get("sharedWith", [])))
    _field("Source", record.source)
    _field("Created", record.created_at)
    if record.deleting_at and record.deleted_at is None:
        _field("Deleting since", record.deleting_at)
    _field("Phase", record.phase)
    expired = record.status.get("expired")
    if expired:
        _field("Expired", f"{expired.get('at')}: {expired.get('message')}"
               + ("; an apply of its manifest does not take it again (rename it to take a "
                  "new one)" if record.source else ""))
    if kind == "Snapshot" and record.spec.get("ttl") and not expired:
        from devcell.controllers import retention as rules

        due = rules.expires_at(record)
        _field("Expires", f"{rules.stamp(due)} (ttl {record.spec['ttl']})" if due else None)
    schedule = record.status.get("schedule")
    if schedule:
        _field("Scheduled", f"by cell {record.labels.get('devcell.dev/scheduled-by')} for the "
                            f"period from {schedule.get('slot')}")
    if kind == "Cell":
        from devcell.store import observations

        at = observations.load(state_dir).get(record.id) if state_dir else None
        _field("Observed", "never confirmed by its backend" if at is None else
               f"{render.age_seconds(int(time.time() - at))} ago (phase confirmed by its backend)")
        restarts = record.status.get("restarts") or {}
        if restarts.get("deaths"):
            backoff = float(restarts.get("retryAt", 0)) - time.time()
            _field("Restarts", f"{restarts['deaths']} (its runtime died behind DevCell's back"
                   + (f"; CrashLoopBackOff: next restart in {backoff:.0f}s)" if backoff > 0
                      else ")"))
    _field("Generation", f"{record.generation} (observed {record.observed_generation})")
    if record.status.get("nextRetryAt"):
        _field("Next retry", f"{record.status['nextRetryAt']} (attempt "
                             f"{int(record.status.get('retries', 0)) + 1}, backing off)")
    if kind == "Cell":
        spec = doc["spec"]
        _field("Backend", spec["backend"])
        build = spec.get("build") or {}
        _field("Image", spec.get("image") or (
            f"built from {build.get('dockerfile', 'Dockerfile')} in {build.get('context')}"
            if build else None))
        if spec.get("features"):
            _field("Features", ", ".join(str(f.get("ref")) for f in spec["features"])
                   + " (installed on it)")
        hold = holds.of(record)
        _field("Desired state", spec.get("state") if hold is None else (
            f"{hold.state}: {hold.describe()}; the manifest says "
            f"{holds.declared_state(record.spec)} (a re-apply of it leaves this; a change of "
            "its spec.state, or `devcell cell start|sleep`, ends it)"))
        _field("Workspace", spec.get("workspace", {}).get("mountPath"))
        storage = _workspace_storage(conn, record.id)
        if storage:
            _field("Workspace storage", storage)
        _field("Workspace on host", _workspace_host_path(conn, record.id, spec, state_dir))
        _field("User", spec.get("user"))
        if spec.get("security"):
            _field("Privileges", _privileges(spec["security"]))
        machine = _machine(conn, record.id)
        if machine:
            _field("Machine", machine)
        lineage = status.get("lineage", {})
        forked = lineage.get("forkedFrom")
        _field("Forked from", f'snapshot {forked["snapshot"]} of cell {forked["cell"]}'
               if forked else None)
        _field("Snapshots", ", ".join(lineage.get("snapshots", [])))
        _field("Ports", _ports(spec, record.id, state_dir))
        if state_dir is not None:
            _field("Idle sleep", _idle(record, state_dir))
        services = spec.get("services", [])
        _field("Services", ", ".join(f"{s['name']} ({' '.join(s['command'])})" for s in services))
        seen = status.get("services") or {}
        for service in services:
            view = seen.get(service["name"])
            if isinstance(view, dict):
                line = render.service(service["name"], view)
                if view.get("check"):
                    line += f"; ready check: {view['check']}"
                    if view.get("checkFailures"):
                        line += f", failed {view['checkFailures']} times in a row"
                    if view.get("checkProblem"):
                        line += f" ({view['checkProblem']})"
                _out().write(f"{'':20}{printable(line)}\n")
        sidecars = spec.get("sidecars") or []
        seen_sidecars = status.get("sidecars") or {}
        _field("Sidecars", ", ".join(
            f"{s['name']} ({s.get('image') or 'built'})" for s in sidecars))
        for sidecar in sidecars:
            view = seen_sidecars.get(sidecar["name"])
            where = (f"; data at {sidecar['volume']['mountPath']}"
                     if (sidecar.get("volume") or {}).get("mountPath") else "")
            state = (str(view.get("state")) + (f" ({view['status']})" if view.get("status")
                                                else "") if isinstance(view, dict)
                     else "not observed yet")
            _out().write(f"{'':20}{printable(sidecar['name'] + ': ' + state + where)}\n")
        _field("Volumes", ", ".join(f"{v['name']} at {v['mountPath']}"
                                    for v in spec.get("volumes") or []))
        _post_create(status.get("postCreate") or {})
        if status.get("sleep"):
            sleep = status["sleep"]
            _field("Last sleep", f"{sleep.get('checkpoint')} "
                   f"(consistency {sleep.get('consistency')}, at {sleep.get('at')})")
        if status.get("rootfs"):  # the last recreate: what it did with the root filesystem
            rootfs = status["rootfs"]
            _field("Root filesystem", f"kept across the recreate at {rootfs.get('at')}"
                   if rootfs.get("kept") else
                   f"started fresh at {rootfs.get('at')}: {rootfs.get('why')}")
        if status.get("lastStart"):
            _field("Last start", f"{status['lastStart']['at']}: {status['lastStart']['note']}")
    else:
        lineage = status.get("lineage", {})
        cell = lineage.get("cell") or lineage.get("cellId")
        origin = status.get("origin") or {}
        if cell is None and origin.get("archive"):
            _field("Cell", f"{origin.get('cell')} (of the state directory it was exported "
                           f"from; cell id {origin.get('cellId') or 'unknown'})")
            _field("Imported", f"from {origin['archive']} at {origin.get('importedAt')} "
                               f"(sha256 {origin.get('sha256')})")
        else:
            _field("Cell", f"{cell}{' (deleted)' if lineage.get('cellDeleted') else ''}")
        consistency = status.get("consistency")
        _field("Consistency", f"{consistency}: {CONSISTENCY_MEANING.get(consistency, '')}"
               if consistency else "not taken yet")
        _field("Taken", status.get("takenAt"))
        checkpoint = status.get("checkpoint") or {}
        _field("Node", f"{checkpoint['node']} (the cluster node holding its checkpoint)"
               if checkpoint.get("node") else None)
        _field("Forks", ", ".join(lineage.get("forks", [])))
    _conditions(status)
    _operations(conn, record.id)
    _events(conn, record.id)


def operation(conn: sqlite3.Connection, ref: str) -> None:
    op = operations.get(conn, ref)
    if op is None:
        raise NotFound(f'operation "{ref}" not found')
    _field("ID", op["id"])
    _field("Object", f"{op['object_kind'].lower()}/{op['object_name']} ({op['object_id']})")
    _field("Action", op["action"])
    _field("Trigger", op["trigger"])
    if op["actor"]:
        _field("By", op["actor"])
    _field("Status", op["status"])
    if op["reason"]:
        _field("Reason", op["reason"])
    if op["message"]:
        _field("Message", op["message"])
    if op["current_step"]:
        _field("Step", op["current_step"])
    _field("Generation", op["generation"])
    _field("Created", op["created_at"])
    _field("Finished", op["finished_at"])
    _out().write("Steps:\n")
    rows = []
    for s in operations.steps(conn, op["id"]):
        took = f"{s.duration_ms:.1f}ms" if s.duration_ms is not None else "-"
        rows.append([s.idx + 1, s.name, s.status, took,
                     json.dumps(s.outputs, sort_keys=True) if s.outputs else "-", s.error or ""])
    _indented_table(["#", "STEP", "STATUS", "DURATION", "OUTPUTS", "ERROR"], rows)
