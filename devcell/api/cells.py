"""Imperative verbs on cells: `snapshot create`, `cell fork`, `cell sleep`, `cell start`,
`cell restart`, `cell rerun-hooks`.

Each writes desired state exactly as an apply of the equivalent manifest would (through
admission), then converges it like an apply. Their input comes from a command line, not a
file, so their problems are located at `<command line>` and name the flag.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devcell import admission, names
from devcell.api import converging
from devcell.api.converging import DEFAULTS, NO_HOOKS, Hooks, Options
from devcell.api.reports import Recorded, Report
from devcell.errors import ManifestError, Problem
from devcell.manifests.model import Manifest
from devcell.store import db as dbmod
from devcell.store import desired, holds, objects

CLI = admission.COMMAND_LINE
TRIGGER = "cli"


def snapshot(state_dir: Path, cell: str, *, name: str, ttl: str | None = None,
             consistency: str | None = None, options: Options = DEFAULTS,
             hooks: Hooks = NO_HOOKS) -> Report:
    """Checkpoint `cell` as a new Snapshot object `name` (that expires after `ttl`; with
    `consistency` "machine", keeping memory too)."""
    _check_name("Snapshot", name)
    if ttl is not None:
        from devcell.errors import UsageError
        from devcell.manifests import quantities

        try:
            quantities.duration_seconds(ttl)
        except ValueError as exc:
            raise UsageError(f"--ttl: {exc}") from None
    db = dbmod.open_database(state_dir)
    try:
        record = objects.require(db.conn, "Cell", cell)
        spec = {"cell": record.name, **({"ttl": ttl} if ttl is not None else {}),
                **({"consistency": consistency} if consistency is not None else {})}
        result = admission.apply_objects(db, [_manifest("Snapshot", name, spec)])
        return _finish(db, result, options, hooks)
    finally:
        db.close()


def fork(state_dir: Path, cell: str, *, snapshot: str, name: str,
         host_ports: dict[int, int] | None = None, publish: bool = True,
         count: int | None = None, exclusive: bool = False, options: Options = DEFAULTS,
         hooks: Hooks = NO_HOOKS) -> Report:
    """A new cell `name` with `cell`'s spec, its workspace restored from `snapshot` (which
    must be a snapshot of `cell`). `host_ports`: container port -> the fork's host port for
    it (the others stay the parent's, which admission refuses while the parent holds them);
    `publish=False`: the fork publishes no port. `count` N makes N forks, `name`-1 to
    `name`-N (fork K publishes `host_ports`' ports plus K-1), recorded together: every name
    and port is checked before any is recorded, then each converges on its own (one that
    fails is named in the report and leaves the others as they are). `exclusive`: refuse a
    `name` that is a recorded cell, checked where the fork is recorded (the HTTP API's: a fork
    never re-applies over a cell its caller may not change)."""
    names_made = fork_names(name, count)
    db = dbmod.open_database(state_dir)
    try:
        source = objects.require(db.conn, "Cell", cell)
        snap = objects.get(db.conn, "Snapshot", snapshot)
        if snap is None:
            raise objects.not_found(db.conn, "Snapshot", snapshot)
        if snap.extra.get("cell_id") != source.id:
            raise ManifestError([Problem(
                CLI, f'snapshot "{snap.name}" {taken_of(db.conn, snap)}, not of '
                     f'"{source.name}"', kind="Cell", name=name, field="--snapshot")])
        import copy  # a fork's only: `snapshot create` does without

        manifests = []
        for k, fork_name in enumerate(names_made):
            spec = copy.deepcopy(source.spec)
            spec["state"] = "Running"
            ports = {inside: host + k for inside, host in (host_ports or {}).items()}
            _fork_ports(spec, ports if publish else None, fork_name)
            spec.setdefault("workspace", {})["from"] = {"snapshot": snap.name}
            spec["workspace"].pop("source", None)  # a fork keeps its snapshot's files
            manifests.append(_manifest("Cell", fork_name, spec, labels=dict(source.labels)))
        with db.write():  # the names checked free and recorded in one transaction: two
            if count is not None or exclusive:  # counted forks at once cannot both take a name
                _check_new(db, names_made)
            result = admission.apply_objects(db, manifests)
        return _finish(db, result, options, hooks)
    finally:
        db.close()


def taken_of(conn: Any, snap: objects.ObjectRecord) -> str:
    """Where `snap` came from, for a refusal: a deleted cell is said deleted (its name may be
    another cell's now, which then read "taken of cell "api", not of "api""), an imported
    snapshot imported (its spec.cell names a cell of the state directory it came from)."""
    cell_id = snap.extra.get("cell_id")
    cell = objects.get(conn, "Cell", cell_id, include_deleted=True) \
        if isinstance(cell_id, str) else None
    if cell is None:
        return "was imported (it is of no cell here)" if cell_id is None else \
            f'was taken of cell "{names.printable(str(snap.spec.get("cell")))}" (deleted)'
    gone = " (deleted)" if cell.deleted_at is not None else ""
    return f'was taken of cell "{names.printable(cell.name)}"{gone}'


def fork_names(name: str, count: int | None) -> list[str]:
    """The cells a fork makes: `name`, or `name`-1 to `name`-N with a count; each name is
    checked (a UsageError for a count below 1)."""
    if count is None:
        _check_name("Cell", name)
        return [name]
    if count < 1:
        from devcell.errors import UsageError

        raise UsageError(f"--count {count}: give at least 1")
    made = [f"{name}-{k}" for k in range(1, count + 1)]
    for fork_name in (made[0], made[-1]):  # the shortest and the longest
        _check_name("Cell", fork_name)
    return made


def _check_new(db: dbmod.Database, made: list[str]) -> None:
    """Every name of a counted fork is free: none is a recorded cell (being deleted too), so
    no fork re-applies over an existing cell."""
    taken = [n for n in made if objects.get(db.conn, "Cell", n) is not None]
    if taken:
        raise ManifestError([Problem(
            CLI, f"cell {', '.join(taken[:5])}{' ...' if len(taken) > 5 else ''} already "
                 f"exist{'s' if len(taken) == 1 else ''}; choose another --name or delete "
                 f"{'it' if len(taken) == 1 else 'them'} first", kind="Cell", name=taken[0],
            field="--name")])


def _fork_ports(spec: dict[str, Any], ports: dict[int, int] | None, name: str) -> None:
    """The fork's published ports: none, or those `ports` maps (container port -> host
    port), its sidecars' (published through the cell's container) included."""
    from devcell import security  # a fork's only

    network = spec.get("network") or {}
    entries = [port for _, port in security.port_entries(spec)]
    if ports is None:
        if network.get("ports"):
            network["ports"] = []
        for sidecar in spec.get("sidecars") or []:
            if sidecar.get("ports"):
                sidecar["ports"] = []
        return
    published = {int(p["containerPort"]) for p in entries}
    unknown = sorted(set(ports) - published)
    if unknown:
        raise ManifestError([Problem(
            CLI, f"--port {unknown[0]}:{ports[unknown[0]]}: the cell publishes no container port "
                 f"{unknown[0]} (it publishes: {', '.join(map(str, sorted(published))) or 'none'})",
            kind="Cell", name=name, field="--port")])
    for port in entries:
        if int(port["containerPort"]) in ports:
            port["hostPort"] = ports[int(port["containerPort"])]
            if port["hostPort"] > 65535:  # a counted fork's: HOST + K - 1
                raise ManifestError([Problem(
                    CLI, f"fork {name} would publish container port {port['containerPort']} "
                         f"on host port {port['hostPort']}, above 65535 (with --count, fork "
                         "K publishes HOST+K-1); give a lower HOST", kind="Cell", name=name,
                    field="--port")])


def sleep(state_dir: Path, cell: str, *, by: str = "cell sleep", reason: str = "",
          options: Options = DEFAULTS, hooks: Hooks = NO_HOOKS) -> Report:
    """Checkpoint the workspace, then put the cell to sleep: a runtime decision held beside
    its manifest (store/holds.py), which a re-apply of the unchanged manifest leaves alone.

    The one call for every sleep that is not the manifest's: `cell sleep`, and an idle sleep
    (`by="idle"`, `reason` saying how long it was idle and its last activity)."""
    return set_state(state_dir, cell, "Sleeping", by=by, reason=reason, options=options,
                     hooks=hooks)


def start(state_dir: Path, cell: str, *, by: str = "cell start", reason: str = "",
          options: Options = DEFAULTS, hooks: Hooks = NO_HOOKS) -> Report:
    """Start a stopped or sleeping cell (held Running until its manifest's state changes)."""
    return set_state(state_dir, cell, "Running", by=by, reason=reason, options=options,
                     hooks=hooks)


def set_state(state_dir: Path, cell: str, state: str, *, by: str = "", reason: str = "",
              options: Options = DEFAULTS, hooks: Hooks = NO_HOOKS) -> Report:
    db = dbmod.open_database(state_dir)
    try:
        change = admission.set_cell_state(db, cell, state, by=by, reason=reason)
        return _finish(db, desired.ApplyResult([change]), options, hooks)
    finally:
        db.close()


def kept(state_dir: Path, cell: str) -> str | None:
    """What a sleeping cell kept, in words (its Ready condition's message: what its backend
    truly keeps), for `cell sleep` to say; None when it is not asleep."""
    db = dbmod.open_database(state_dir)
    try:
        record = objects.get(db.conn, "Cell", cell)
        if record is None or record.phase != objects.Phase.SLEEPING:
            return None
        ready = record.condition("Ready") or {}
        return str(ready.get("message") or "") or None
    finally:
        db.close()


def rerun_hooks(state_dir: Path, cell: str, *, options: Options = DEFAULTS,
                hooks: Hooks = NO_HOOKS) -> Report:
    """Run the cell's postCreate hooks again (then postStart), in its running runtime: a
    recorded operation; on success the services the hooks held start."""
    from devcell.store import asks

    return _ask(state_dir, cell, asks.RERUN_HOOKS, "rerun of its hooks requested",
                options=options, hooks=hooks)


def restart(state_dir: Path, cell: str, service: str | None = None, *,
            options: Options = DEFAULTS, hooks: Hooks = NO_HOOKS) -> Report:
    """Restart the cell's services (its runtime stopped and started: postStart runs again,
    postCreate does not), or only `service` (through the cell's supervisor)."""
    from devcell.store import asks

    what = f"restart of service {service} requested" if service else "restart requested"
    return _ask(state_dir, cell, asks.RESTART, what, options=options, hooks=hooks,
                service=service)


def _ask(state_dir: Path, cell: str, what: str, outcome: str, *, options: Options,
         hooks: Hooks, **details: Any) -> Report:
    """Record an ask on a running cell (asks.py) and converge it like any verb."""
    from devcell.backends import supervisor
    from devcell.store import asks

    db = dbmod.open_database(state_dir)
    try:
        with db.write() as conn:
            record = objects.require(conn, "Cell", cell)
            problems = admission.state_problems(record)
            if holds.desired_state(record) != "Running" or record.phase not in (
                    objects.Phase.RUNNING, objects.Phase.PENDING):
                problems.append(Problem(CLI, f"is {record.phase or 'not made yet'}, not "
                                        f"Running; start it first (`devcell cell start "
                                        f"{record.name}`)", kind="Cell", name=record.name))
            service = details.get("service")
            if service is not None and service not in supervisor.service_names(record.spec):
                known = ", ".join(supervisor.service_names(record.spec)) or "none"
                problems.append(Problem(CLI, f"has no service {service!r} (its services: "
                                        f"{known})", kind="Cell", name=record.name))
            if problems:
                raise ManifestError(problems)
            asks.ask(conn, record, what, **details)
        change = desired.Change("Cell", record.name, outcome, record.id, needs_reconcile=True)
        return converging.finish(db, Recorded((change,)), trigger=TRIGGER, options=options,
                                 hooks=hooks, keys=[("Cell", record.id)])
    finally:
        db.close()


def _finish(db: dbmod.Database, result: desired.ApplyResult, options: Options,
            hooks: Hooks) -> Report:
    return converging.finish(db, Recorded(tuple(result.changes)), trigger=TRIGGER,
                             options=options, hooks=hooks)


def _check_name(kind: str, name: str) -> None:
    problem = names.name_problem(name)
    if problem:
        raise ManifestError([Problem(CLI, problem, kind=kind, name=name[:40], field="--name")])


def _manifest(kind: str, name: str, spec: dict[str, Any],
              labels: dict[str, str] | None = None) -> Manifest:
    return Manifest(kind=kind, name=name, spec=spec, labels=labels or {}, annotations={},
                    file=CLI, source="cli", line=1)
