"""Admission: the rules a manifest must pass against recorded state and DevCell's policy
before it is recorded, as Kubernetes' admission runs between validation and storage.

Validation (devcell.manifests) checks each document alone; admission checks what needs the
recorded state (names defined twice, immutable fields, references to cells and snapshots) and
the security policy of the configuration (host mounts, host network, published addresses,
host paths shared between cells). Recording (devcell.store.desired) runs these rules through
the `Admit` hook before its write and again under the write lock, so every caller that
records desired state gets them; `apply` and `apply_objects` here are how callers record.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devcell import backends
from devcell.errors import ManifestError, Problem
from devcell.manifests.model import Manifest, SourceFile, field_path
from devcell.store import desired, objects, prunes, retention

if TYPE_CHECKING:
    from devcell.manifests.selectors import Selector
    from devcell.store import client_sets
from devcell.store.db import Database

COMMAND_LINE = "<command line>"
"""Where a problem with an imperative verb's input is located (it has no file)."""


class Rules:
    """Every admission rule for one state directory (the `Admit` hook of desired)."""

    def __init__(self, state_dir: Path, *, leaving_under: Sequence[str] = (),
                 pruning: bool = False) -> None:
        """`leaving_under`: roots whose cells go when their manifests are gone (an
        `apply --prune`'s paths, `pruning`; the daemon's directory): such a cell's host ports
        are not held against the cells of this apply."""
        self.state_dir = state_dir
        self.leaving_under = [os.path.abspath(p) for p in leaving_under]
        self.pruning = pruning

    def __call__(self, conn: sqlite3.Connection, manifests: list[Manifest],
                 defined: dict[tuple[str, str], str]) -> list[Problem]:
        from devcell import security  # the rules' only: a no-op apply admits nothing

        # The recorded cells matter only to a cell with host mounts (the shared-path rule);
        # reading them for every apply would make one edit cost the size of the store.
        mounting = any(m.kind == "Cell" and security.host_mounts(m.spec) for m in manifests)
        recorded = objects.cells_with_host_mounts(conn) if mounting else {}
        problems = reference_problems(conn, manifests, defined)
        problems += backend_problems(conn, manifests)
        problems += security_problems(manifests, self.state_dir, recorded,
                                      made=_sources_already_used(conn, manifests))
        problems += port_problems(conn, manifests, lambda name, source: self._leaving(
            name, source, manifests, defined))
        if mounting:
            problems += host_command_problems(manifests, objects.cells_with_host_commands(conn))
        commanding = [m for m in manifests if m.kind == "Cell" and m.source != "-"
                      and (m.spec.get("hooks") or {}).get("hostInitialize")]
        if commanding:
            binders = recorded if mounting else objects.cells_with_host_mounts(conn)
            for m in commanding:
                found = security.host_command_problem(
                    m.spec, os.path.dirname(m.source),
                    {n: spec for n, spec in binders.items() if n != m.name})
                if found:
                    problems.append(_at(m, ("hooks", "hostInitialize"), found))
        return problems

    def _leaving(self, name: str, source: str | None, manifests: list[Manifest],
                 defined: dict[tuple[str, str], str]) -> bool:
        """Whether recorded cell `name` goes with this apply or the daemon's next prune: its
        manifest file is gone from a root that prunes, or (an `apply --prune`) nothing this
        apply reads defines it any more."""
        if not source or source == "-" or not any(
                source.startswith(root + os.sep) for root in self.leaving_under):
            return False
        if not os.path.exists(source):
            return True
        return self.pruning and ("Cell", name) not in defined and not any(
            m.kind == "Cell" and m.name == name for m in manifests)


def port_problems(conn: sqlite3.Connection, manifests: list[Manifest],
                  leaving: Callable[[str, str | None], bool] = lambda name, source: False
                  ) -> list[Problem]:
    """A host port another cell publishes (recorded, or earlier in this apply), named with
    that cell: checked when a manifest or a fork is admitted, so no admitted state holds two
    cells on one host address and port. Read only when a cell of the apply publishes one. A
    cell being deleted, or going with this apply's prune (`leaving`), holds no port against
    the newcomer: moving a port from one file's cell to another's is one apply (the newcomer
    waits for the old cell's deletion before it starts: the cell controller's PortHeld)."""
    from devcell import security

    cells = [m for m in manifests if m.kind == "Cell" and security.published(m.spec)]
    if not cells:
        return []
    names = {m.name for m in manifests if m.kind == "Cell"}
    others = {name: held.spec for name, held in objects.cells_publishing_ports(conn).items()
              if name not in names  # a cell of this apply is checked as it will be
              and not held.deleting and not leaving(name, held.source)}
    problems = []
    for m in cells:
        problems += [desired.problem_at(m, ("spec", *path), message)
                     for path, message in security.port_clashes(m.spec, others)]
        others[m.name] = m.spec
    return problems


def apply(db: Database, files: list[SourceFile], *, dry_run: bool = False,
          prune_roots: list[str] | None = None, prune_selector: Selector | None = None,
          parse_cache: dict[str, tuple[list[Manifest], list[Problem]]] | None = None,
          require_objects: bool = False, keep_pruned: int = prunes.DEFAULT_KEEP_SECONDS,
          leaving_under: Sequence[str] = (),
          client_set: client_sets.ClientSet | None = None) -> desired.ApplyResult:
    """Admit and record manifest files, all or nothing (see desired.apply). `leaving_under`:
    a directory the daemon prunes (a cell whose file is gone from it holds no port);
    `client_set`: an apply through the API (store.client_sets)."""
    rules = Rules(db.state_dir, leaving_under=prune_roots or leaving_under,
                  pruning=bool(prune_roots) and prune_selector is None)
    return desired.apply(db, files, dry_run=dry_run, prune_roots=prune_roots,
                         prune_selector=prune_selector, keep_pruned=keep_pruned,
                         parse_cache=parse_cache, admit=rules,
                         require_objects=require_objects, client_set=client_set)


def apply_objects(db: Database, manifests: list[Manifest]) -> desired.ApplyResult:
    """Admit and record objects made by an imperative verb (`snapshot create`, `cell fork`)."""
    return desired.apply_objects(db, manifests, admit=Rules(db.state_dir))


def set_cell_state(db: Database, ref: str, state: str, *, by: str = "",
                   reason: str = "") -> desired.Change:
    """Admit and record a runtime decision on a cell's state (`cell sleep`, `cell start`, an
    idle sleep: `by` names it, `reason` says why): a hold beside the manifest's spec, not a
    change of it (store/holds.py says which wins).

    The rule and the write share one transaction (desired's write nests as a savepoint), so a
    delete asked for meanwhile cannot slip between them.
    """
    with db.write() as conn:
        problems = state_problems(objects.require(conn, "Cell", ref))
        if problems:
            raise ManifestError(problems)
        return desired.set_cell_state(db, ref, state, by=by, reason=reason)


def state_problems(cell: objects.ObjectRecord) -> list[Problem]:
    """A cell being deleted keeps its desired state: the delete wins."""
    if cell.deleting:
        return [Problem(COMMAND_LINE, "is being deleted", kind="Cell", name=cell.name)]
    return []


def _sources_already_used(conn: sqlite3.Connection, manifests: list[Manifest]) -> set[str]:
    """Cells whose one-time workspace source (git, directory, archive: used when the workspace
    is made, never again) is the one already recorded: the repository, directory or file may
    be long gone, and an unchanged manifest must still apply as `unchanged`. A live folder
    (hostPath) is bound at every start, so it is always judged."""
    once = {m.name: source for m in manifests if m.kind == "Cell"
            and (source := (m.spec.get("workspace") or {}).get("source"))
            and "hostPath" not in source}
    if not once:
        return set()
    recorded = objects.workspace_sources(conn, once)
    return {name for name, source in once.items() if recorded.get(name) == source}


def _at(m: Manifest, path: tuple[str | int, ...], message: str) -> Problem:
    """A problem at spec.`path` of `m`, with its line."""
    full = ("spec", *path)
    line, column = m.where(*full)
    return Problem(m.file, message, line=line, column=column, kind=m.kind, name=m.name,
                   field=field_path(full))


def host_command_problems(manifests: list[Manifest],
                          recorded: dict[str, tuple[dict[str, Any], str]]) -> list[Problem]:
    """A Cell of this apply binding writable a host folder a recorded cell's host commands
    run in or name (security.host_command_problem): it could change what runs on the host.
    (The commands' own cell is judged at its admission and before each run.)"""
    from devcell import security

    problems: list[Problem] = []
    for m in manifests:
        if m.kind != "Cell" or not security.host_mounts(m.spec):
            continue
        for name, (spec, source) in sorted(recorded.items()):
            if name == m.name:
                continue
            found = security.host_command_problem(spec, os.path.dirname(source),
                                                  {m.name: m.spec})
            if found:
                live = ((m.spec.get("workspace") or {}).get("source") or {}).get("hostPath")
                where = ("workspace", "source", "hostPath", "path") if live else ("mounts",)
                problems.append(_at(m, where, f"cell {name}'s hooks.hostInitialize could be "
                                    f"changed by this cell: {found}"))
    return problems


def security_problems(manifests: list[Manifest], state_dir: Any,
                      recorded: dict[str, dict[str, Any]] | None = None, *,
                      made: Collection[str] = ()) -> list[Problem]:
    """DevCell's security rules (devcell.security) for these Cells, located like any problem.

    recorded: name -> spec of the live cells already recorded (their host mounts count).
    made: cells whose one-time workspace source is already used (not judged again).

    DevCell's configuration is read only when a Cell is checked; a broken configuration
    raises ConfigError (nothing is applied until it is fixed).
    """
    cells = [m for m in manifests if m.kind == "Cell"]
    if not cells:
        return []
    # A Cell's rules only: `snapshot create` and a no-op apply (nothing admitted) need none.
    from devcell import config, security
    from devcell.backends.archives import unpack as archive_unpack
    from devcell.backends.host import workspace_seed

    policy = config.load(state_dir).security
    problems = []

    def located(m: Manifest, path: tuple[str | int, ...], message: str) -> Problem:
        full = ("spec", *path)
        line, column = m.where(*full)
        return Problem(m.file, message, line=line, column=column, kind=m.kind, name=m.name,
                       field=field_path(full))

    for m in cells:
        found = [(path, message) for path, message
                 in security.cell_problems(m.spec, policy, state_dir)
                 if m.name not in made or path[:2] != ("workspace", "source")]
        for path, message in found:
            problems.append(located(m, path, message))
        if m.spec.get("dotfiles") and not backends.capabilities(m.spec["backend"]).exec:
            problems.append(located(m, ("dotfiles",), f'backend "{m.spec["backend"]}" runs '
                                    "no command in a cell, so it cannot install dotfiles "
                                    "(use the container or vm backend)"))
        if not backends.capabilities(m.spec["backend"]).start_hooks:
            for which in ("postCreate", "postStart"):
                if (m.spec.get("hooks") or {}).get(which):
                    problems.append(located(m, ("hooks", which), (
                        f'backend "{m.spec["backend"]}" does not run hooks when it starts a '
                        "cell yet, so this hook would be skipped (use the container backend, "
                        "or run it yourself with `devcell exec`)")))
        if (m.spec.get("hooks") or {}).get("hostInitialize") and m.source == "-":
            problems.append(located(m, ("hooks", "hostInitialize"), (
                "host commands run in the folder of the manifest's file, and this one was "
                "read from standard input; apply it from a file")))
        elif (m.spec.get("hooks") or {}).get("hostInitialize"):
            written = security.host_command_problem(m.spec, os.path.dirname(m.source))
            if written:
                problems.append(located(m, ("hooks", "hostInitialize"), written))
        if not backends.capabilities(m.spec["backend"]).service_state:
            for i, service in enumerate(m.spec.get("services") or []):
                if service.get("ready"):
                    problems.append(located(m, ("services", i, "ready"), (
                        f'backend "{m.spec["backend"]}" does not report its services\' '
                        "state yet, so a readiness check could not hold Ready (use the "
                        "container backend)")))
        archive = workspace_seed.of_spec(m.spec)
        if isinstance(archive, workspace_seed.ArchiveSource) and not found and \
                m.name not in made:
            problem = archive_unpack.header_problem(os.path.realpath(archive.path))
            if problem:
                problems.append(located(m, ("workspace", "source", "archive", "path"), problem))
        # A verb's copy of a recorded cell (a fork) has no manifest tree to judge a context
        # against: its builds were admitted with the cell it was copied from.
        builds: list[tuple[tuple[str | int, ...], dict[str, Any]]] = [
            ((), m.spec["build"])] if m.spec.get("build") is not None else []
        if m.source == desired.IMPERATIVE:
            builds = []
        builds += [(("sidecars", i), sidecar["build"])
                   for i, sidecar in enumerate(m.spec.get("sidecars") or [])
                   if sidecar.get("build") is not None and m.source != desired.IMPERATIVE]
        home = os.path.dirname(m.source) if m.source != "-" else os.getcwd()
        problems += [located(m, path, message) for path, message
                     in _feature_problems(m.spec, home, policy, Path(state_dir))]
        for under, build in builds:
            for path, message in security.build_context_problems(build, home, policy,
                                                                 Path(state_dir)):
                problems.append(located(m, (*under, *path), message))
    mounting = {m.name: binds for m in cells if (binds := security.host_mounts(m.spec))}
    if mounting:
        others = {name: binds for name, spec in (recorded or {}).items()
                  if name not in mounting and (binds := security.host_mounts(spec))}
        for m in cells:
            for i, mine in enumerate(mounting.get(m.name, [])):
                clash = next(((owner, theirs) for owner, mounts in {**others, **mounting}.items()
                              if owner != m.name for theirs in mounts
                              if security.shared_mount_problem(mine, theirs, owner)), None)
                if clash is not None:
                    shared = security.shared_mount_problem(mine, clash[1], clash[0]) or ""
                    problems.append(located(m, security.host_mount_field(m.spec, i), shared))
    return problems


DEFINED_TWICE = "is defined twice in this apply"
"""The words of the problem an object defined in two files gets (the daemon looks for it)."""


def _feature_problems(spec: dict[str, Any], home: str, policy: Any, state_dir: Path
                      ) -> list[tuple[tuple[str | int, ...], str]]:
    """spec.features at admission: only where images are built; a local folder where a
    build context may lie, with metadata and options install.sh can take (checked offline,
    so the file and line are named now; a remote feature's are checked when it is fetched,
    at the build)."""
    from devcell import security
    from devcell.manifests import feature_refs

    features = spec.get("features") or []
    if not features:
        return []
    if not backends.capabilities(spec["backend"]).builds_images:
        return [(("features",), f'backend "{spec["backend"]}" builds no images, so it cannot '
                 "install features (use the container backend)")]
    found: list[tuple[tuple[str | int, ...], str]] = []
    for i, entry in enumerate(features):
        if feature_refs.parse(entry["ref"]).kind is not feature_refs.Kind.LOCAL:
            continue
        problem = security.feature_folder_problem(entry["ref"], home, policy, state_dir)
        if problem:
            found.append((("features", i, "ref"), problem))
            continue
        from devcell.backends.features import metadata
        from devcell.errors import ImageBuildFailed

        shown = str(entry["ref"])
        try:
            feature = metadata.read(entry["ref"], shown)
            metadata.resolve_options(feature, entry.get("options") or {}, shown)
        except ImageBuildFailed as exc:
            found.append((("features", i), str(exc)))
    return found


def reference_problems(conn: sqlite3.Connection, manifests: list[Manifest],
                       defined: dict[tuple[str, str], str]) -> list[Problem]:
    """The same name twice, objects being deleted, immutable fields, references to cells and
    snapshots that exist neither in this apply (`defined`: also recorded unchanged, where)
    nor in the store."""
    from devcell.backends.host import live_folder  # here, as limits below: a no-op apply
    # admits nothing and imports neither (the snapshot path imports them with its backend)

    problems: list[Problem] = []
    defined = dict(defined)
    for m in manifests:
        key = (m.kind, m.name)
        if key in defined:
            problems.append(desired.problem_at(m, ("metadata", "name"),
                                     f'{m.kind} "{m.name}" {DEFINED_TWICE} '
                                     f"(also in {defined[key]})"))
            continue
        defined[key] = f"{m.file}:{m.line}"
    for m in manifests:
        existing = objects.get(conn, m.kind, m.name)
        if existing is not None and existing.deleting:
            problems.append(desired.problem_at(m, ("metadata", "name"),
                                     f'{m.kind.lower()} "{m.name}" is being deleted; '
                                     "apply again once it is gone (a deletion a killed "
                                     "command left undone is finished by the daemon, "
                                     "`devcell gc` or the same `devcell delete` again)"))
            continue
        if m.kind == "Snapshot":
            cell = m.spec["cell"]
            if existing is not None and existing.spec["cell"] != m.spec["cell"]:
                problems.append(desired.problem_at(
                    m, ("spec", "cell"),
                    f'a Snapshot\'s cell is immutable (recorded cell "{existing.spec["cell"]}", '
                    f'got "{cell}"); delete the snapshot and create a new one'))
            elif existing is not None and existing.spec.get("consistency") != \
                    m.spec.get("consistency"):
                problems.append(desired.problem_at(
                    m, ("spec", "consistency"),
                    f"a Snapshot's consistency is immutable (recorded "
                    f"{existing.spec.get('consistency') or 'the default'}, got "
                    f"{m.spec.get('consistency') or 'the default'}); delete the snapshot and "
                    "create a new one"))
            elif existing is None and m.spec.get("consistency") == "machine" and \
                    (backend := _cell_backend(conn, manifests, cell)) is not None and \
                    not backends.capabilities(backend).memory_state:
                problems.append(desired.problem_at(
                    m, ("spec", "consistency"),
                    f'cell "{cell}" runs on backend "{backend}", which keeps no memory: '
                    "consistency machine needs a vm cell; leave it out for the workspace "
                    "files"))
            elif existing is None and m.source != desired.IMPERATIVE and \
                    retention.expired_named(conn, m.name) is not None:
                pass  # expired: recorded as such, never taken again (its cell may be gone)
            elif existing is None and ("Cell", cell) not in defined \
                    and objects.get(conn, "Cell", cell) is None:
                problems.append(desired.problem_at(m, ("spec", "cell"), f'cell "{cell}" not found'))
            continue
        source = m.spec.get("workspace", {}).get("from")
        if existing is not None:
            if existing.spec["backend"] != m.spec["backend"]:
                problems.append(desired.problem_at(
                    m, ("spec", "backend"),
                    f'field is immutable (recorded "{existing.spec["backend"]}", got '
                    f'"{m.spec["backend"]}"); delete the cell and create it again'))
            old_folder = live_folder.of_spec(existing.spec)
            if old_folder != live_folder.of_spec(m.spec) and source is None:
                problems.append(desired.problem_at(
                    m, ("spec", "workspace", "source"),
                    f"a workspace bound live to a host folder is immutable (recorded "
                    f"{old_folder.shown if old_folder else 'none'}); delete the cell and "
                    "create it again (the folder stays)"))
            old_source = existing.spec.get("workspace", {}).get("from")
            if old_source != source:
                problems.append(desired.problem_at(
                    m, ("spec", "workspace", "from"),
                    f"fork source is immutable (recorded {_fork_source(old_source)}, got "
                    f"{_fork_source(source)})"))
        if source is not None and existing is None:
            snap = source["snapshot"]
            if ("Snapshot", snap) not in defined:
                found = objects.get(conn, "Snapshot", snap)
                expired = retention.expired_named(conn, snap) if found is None else None
                if expired is not None:
                    problems.append(desired.problem_at(
                        m, ("spec", "workspace", "from", "snapshot"),
                        f'snapshot "{snap}" expired '
                        f'({expired.status.get("expired", {}).get("message", "")}); '
                        "fork another snapshot"))
                elif found is None:
                    problems.append(desired.problem_at(m, ("spec", "workspace", "from", "snapshot"),
                                             f'snapshot "{snap}" not found'))
                elif found.deleting:
                    problems.append(desired.problem_at(m, ("spec", "workspace", "from", "snapshot"),
                                             f'snapshot "{snap}" is being deleted'))
    return problems


def backend_problems(conn: sqlite3.Connection, manifests: list[Manifest]) -> list[Problem]:
    """What the cell's backend could never run: its limits (devcell.backends.limits), and a
    fork of a snapshot another backend took (its checkpoint exists only in that backend)."""
    from devcell.backends import limits

    in_apply = {(m.kind, m.name): m for m in manifests}
    problems: list[Problem] = []
    for m in manifests:
        if m.kind != "Cell":
            continue
        backend = m.spec["backend"]
        problems += [desired.problem_at(m, path, message)
                     for path, message in limits.cell_problems(m.spec, backend)]
        source = m.spec.get("workspace", {}).get("from")
        if source is None:
            continue
        theirs = _snapshot_backend(conn, in_apply, source["snapshot"])
        if theirs is not None and theirs != backend:
            problems.append(desired.problem_at(
                m, ("spec", "workspace", "from", "snapshot"),
                f'snapshot "{source["snapshot"]}" was taken by the {theirs} backend and this '
                f"cell runs on the {backend} backend; a cell can only be forked from a "
                "snapshot of its own backend"))
    return problems


def _snapshot_backend(conn: sqlite3.Connection, in_apply: dict[tuple[str, str], Manifest],
                      snapshot: str) -> str | None:
    """The backend that takes (or took) `snapshot`: that of its cell; None if unknown."""
    snap = in_apply.get(("Snapshot", snapshot))
    if snap is not None:
        cell_name = snap.spec["cell"]
        cell = in_apply.get(("Cell", cell_name))
        if cell is not None:
            return str(cell.spec["backend"])
        recorded_cell = objects.get(conn, "Cell", cell_name)
        return str(recorded_cell.extra["backend"]) if recorded_cell is not None else None
    recorded = objects.get(conn, "Snapshot", snapshot)
    if recorded is None:
        return None
    from devcell.controllers import snapshot as snapshot_controller  # a fork's rule only

    owner = snapshot_controller.source_cell(conn, recorded)
    if owner is not None:
        return str(owner.extra["backend"])
    imported = recorded.status.get("origin", {}).get("backend")  # no cell here: its import's
    return str(imported) if imported else None


def _fork_source(source: dict[str, str] | None) -> str:
    return f'snapshot "{source["snapshot"]}"' if source else "none"




def _cell_backend(conn: sqlite3.Connection, manifests: list[Manifest], cell: str) -> str | None:
    """The backend of cell `cell`: as applied in the same request, else as recorded."""
    for m in manifests:
        if m.kind == "Cell" and m.name == cell:
            return str(m.spec.get("backend") or "")
    found = objects.get(conn, "Cell", cell)
    return str(found.spec.get("backend")) if found is not None else None
