"""`diff`: what an apply of manifests would change, as a unified diff of each recorded object
against its manifest (metadata and spec, keys sorted; secrets never shown: a changed one
reads `<secret changed>`), and a built cell's image when its build's inputs moved.

Below the command line so that the HTTP API answers the same (POST /api/v1/diff, `devcell
--server URL diff`): `diff_sources` judges, `write` prints what `devcell diff` prints, each
object's file named by the caller (the server's stream maps back to the client's files).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from devcell.errors import BackendError, ManifestError, Problem
from devcell.manifests.loader import SourceFile
from devcell.names import printable
from devcell.records import Record
from devcell.store import db as dbmod


class ObjectDiff(Record):
    """One manifest's difference from its recorded object."""

    kind: str
    name: str
    line: int
    """Where its document starts in its source (the server's: in the stream it received)."""
    file: str
    hunks: tuple[str, ...]
    """The unified diff's lines after its two header lines; empty: no difference."""
    hold: str | None = None
    """A held cell's comment (store/holds.py), said after its diff; no difference itself."""
    undecided: bool = False
    """Its build's inputs could not be judged: never reported as no difference."""

    @property
    def label(self) -> str:
        return f"{self.kind.lower()}/{self.name}"


class DiffReport(Record):
    objects: tuple[ObjectDiff, ...]
    warnings: tuple[str, ...]
    """Lines `devcell diff` says on stderr (a build's inputs that cannot be judged)."""

    @property
    def differs(self) -> bool:
        return any(o.hunks or o.undecided for o in self.objects)

    def document(self) -> dict[str, Any]:
        """As the API answers it."""
        return {"items": [{"kind": o.kind, "name": o.name, "line": o.line,
                           "hunks": list(o.hunks), "hold": o.hold, "undecided": o.undecided}
                          for o in self.objects],
                "warnings": list(self.warnings), "differs": self.differs}

    @classmethod
    def of_document(cls, doc: dict[str, Any], file_at: Callable[[int], tuple[str, int]]
                    ) -> DiffReport:
        """The API's answer, each object's file found by `file_at(line)` (the client's
        file, and the line in it, for a line of the stream it sent). What a server says is
        taken as text, never trusted to be well made (write escapes it)."""
        found = []
        for item in doc.get("items", []):
            line = item.get("line")
            line = line if isinstance(line, int) and line > 0 else 1
            file, _ = file_at(line)
            hold = item.get("hold")
            found.append(ObjectDiff(str(item["kind"]), str(item["name"]), line, file,
                                    tuple(str(h) for h in item.get("hunks", [])),
                                    None if hold is None else str(hold),
                                    bool(item.get("undecided"))))
        return cls(tuple(found), tuple(str(w) for w in doc.get("warnings", [])))


def write(report: DiffReport, out: TextIO, err: TextIO) -> int:
    """Print the report as `devcell diff` does; its exit code (1: differs, as kubectl)."""
    for warning in report.warnings:
        err.write(printable(warning) + "\n")
    for o in report.objects:
        if o.hunks:
            label = printable(o.label)
            out.write(f"--- recorded/{label}\n+++ {printable(o.file)}/{label}\n")
            # Each line escaped (a no-op on YAML's own, ASCII and escaped): a server's
            # answer cannot write to the terminal, nor forge a line, through them.
            out.writelines(printable(h.removesuffix("\n")) + "\n" for h in o.hunks)
        if o.hold is not None:
            out.write(printable(o.hold) + "\n")
    return 1 if report.differs else 0


Judge = Callable[[Any, Any, Any], bool]
"""`judge(conn, manifest, recorded or None)` for a caller who is not the state directory's
user (server/app.py): raises when that caller may not have the manifest judged at all (one
whose judging reads the server's files), and answers whether they may learn if its secret
values equal the recorded ones."""


def diff_sources(state_dir: Path, sources: list[SourceFile], *, judge: Judge | None = None
                 ) -> DiffReport:
    """Each manifest of `sources` against what is recorded; ManifestError with every located
    problem when any does not validate (nothing is recorded either way).

    With `judge` (the API's caller), every manifest is judged before any is compared, and a
    manifest whose judge says no has its secrets compared with nobody: a diff that says
    whether a value given equals the recorded one confirms a guess of it, which reads a
    secret that GET never shows. Such a manifest that gives a secret's value is undecided
    (with a warning), never "no difference"."""
    from devcell.manifests import secrets, validate
    from devcell.store import desired, objects, preconditions

    manifests = []
    problems = []
    place = desired.validator_place_of(state_dir)
    for source in sources:
        found, bad = validate.parse_source(source, place)
        manifests.extend(found)
        problems.extend(bad)
    if not problems and not manifests:  # as apply says it (kubectl: no objects passed)
        problems.append(Problem(", ".join(s.display for s in sources) or "no files",
                                "no objects passed to diff (the files hold only comments or "
                                "empty documents)"))
    if problems:
        raise ManifestError(problems)
    db = _recorded(state_dir)
    try:
        given = [_gives_secrets(m, secrets) for m in manifests]  # before `<redacted>` is filled
        blind = []  # each judged (a refusal raised) before anything is compared
        for m, gives in zip(manifests, given, strict=True):
            existing = objects.get(db.conn, m.kind, m.name)
            may_see = judge(db.conn, m, existing) if judge is not None else True
            blind.append(gives and existing is not None and not may_see)
        manifests, hidden = preconditions.unredacted(db.conn, manifests)  # as apply takes them
        if hidden:
            raise ManifestError(hidden)
        warnings: list[str] = []
        found_diffs = []
        for m, unseen in zip(manifests, blind, strict=True):
            existing = objects.get(db.conn, m.kind, m.name)
            if existing is None and desired.expired_again(db.conn, m):
                continue  # an apply would not take it again: nothing would change
            found_diffs.append(_one(db, m, existing, warnings, secrets, blind=unseen))
        return DiffReport(tuple(found_diffs), tuple(warnings))
    finally:
        db.close()


def _recorded(state_dir: Path) -> dbmod.Database:
    """The database to compare with; an empty one in memory where the state directory has
    none (no state.db, or an empty file): a preview leaves no state behind. A mistyped
    --state-dir made a database there, which later commands took for a real, empty state
    (attack43, I). Beside what an earlier database recorded it is refused, as opening is."""
    import stat

    from devcell.store import guard

    path = state_dir / dbmod.DB_FILENAME
    try:
        found = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        found = None
    if found is not None and not (stat.S_ISREG(found.st_mode) and found.st_size == 0):
        return dbmod.open_database(state_dir)  # a link, or anything else: its own checks
    if found is not None or state_dir.is_dir():
        guard.refuse_leftovers(state_dir, path)
    return dbmod.Database(state_dir, memory=True)


def _gives_secrets(m: Any, secrets: Any) -> bool:
    """Whether the manifest gives a secret's value (anything but get's `<redacted>`, which
    keeps the recorded one)."""
    return any(v != secrets.REDACTED for i in secrets.entries(m.spec)
               for k, v in m.spec["env"][i].items() if k not in ("name", "secret"))


def _one(db: dbmod.Database, m: Any, existing: Any, warnings: list[str], secrets: Any, *,
         blind: bool = False) -> ObjectDiff:
    label = f"{m.kind.lower()}/{m.name}"
    undecided = False
    old: dict[str, Any] = {}
    if existing is not None and blind:  # both sides hidden alike: equal or not, unsaid
        old_spec, new_spec = secrets.redact(existing.spec), secrets.redact(m.spec)
        undecided = True
        warnings.append(f"warning: {label}: whether its secret values changed is said only "
                        "to those who may change it (a confirmed guess would read a secret)")
    elif existing is not None:
        # Secrets never printed: a changed one shows as `<secret changed>`.
        old_spec, new_spec = secrets.redact_pair(existing.spec, m.spec)
        old = {"metadata": {"name": existing.name, "labels": existing.labels,
                            "annotations": existing.annotations}, "spec": old_spec}
    else:
        new_spec = secrets.redact(m.spec)
    new = {"metadata": {"name": m.name, "labels": m.labels, "annotations": m.annotations},
           "spec": new_spec}
    if existing is not None and m.kind == "Cell" and (
            m.spec.get("build") is not None or m.spec.get("features")):
        images = _build_images(db, existing, m, label, warnings)
        if images is None:
            undecided = True  # cannot say: never "no difference"
        elif images[0] != images[1]:  # the build's inputs changed, the manifest need not
            old["status"] = {"build": {"image": images[0]}}
            new["status"] = {"build": {"image": images[1]}}
    if existing is not None and m.kind == "Cell" and any(
            s.get("build") is not None for s in m.spec.get("sidecars") or []):
        sidecars = _sidecar_images(db, existing, m, label, warnings)
        if sidecars is None:
            undecided = True
        elif sidecars:  # a sidecar's build inputs changed: as the cell's own, shown
            for side, which in ((old, 0), (new, 1)):
                build = side.setdefault("status", {}).setdefault("build", {})
                build["sidecars"] = {n: pair[which] for n, pair in sidecars.items()}
    old_lines = _yaml_lines(old) if existing is not None else []
    hunks = list(difflib.unified_diff(old_lines, _yaml_lines(new)))[2:]
    hold = _hold(existing, m.spec, label) if existing is not None and m.kind == "Cell" else None
    return ObjectDiff(m.kind, m.name, m.line, m.file, tuple(hunks), hold, undecided)


def _yaml_lines(doc: dict[str, Any]) -> list[str]:
    import yaml

    # Keys sorted: the order a spec was written in (or get printed it in) is no change.
    return yaml.safe_dump(doc, sort_keys=True).splitlines(keepends=True)


def _build_images(db: dbmod.Database, existing: Any, m: Any, label: str, warnings: list[str]
                  ) -> tuple[str, str] | None:
    """(the image the cell's runtime was made from, the one its build names now), the same
    twice when they agree or nothing was recorded; None (with a warning) when the build's
    inputs cannot be judged."""
    from devcell.reconciler import build_inputs

    try:
        moved = build_inputs.compare(db, existing.id, m.name, existing.extra["backend"],
                                     m.spec, m.source, existing.status)
    except BackendError as exc:
        warnings.append(f"warning: {label}: cannot say whether its build's inputs changed: "
                        f"{exc}")
        return None
    return moved or ("", "")


def _sidecar_images(db: dbmod.Database, existing: Any, m: Any, label: str,
                    warnings: list[str]) -> dict[str, tuple[str, str]] | None:
    """Each built sidecar whose image moved: (the image it runs, the one its build names
    now); None (with a warning) when that cannot be judged."""
    from devcell.reconciler import build_inputs

    try:
        return build_inputs.compare_sidecars(db, existing.id, m.name, existing.extra["backend"],
                                             m.spec, m.source, existing.status)
    except BackendError as exc:
        warnings.append(f"warning: {label}: cannot say whether a sidecar's build inputs "
                        f"changed: {exc}")
        return None


def _hold(existing: Any, spec: dict[str, Any], label: str) -> str | None:
    """A held cell (store/holds.py): which state an apply of this manifest leaves it in. Said
    as a comment, after the diff: a hold is no difference of the manifest (the exit code
    does not count it), but a reader must see that the running cell is not what it says."""
    from devcell.store import holds

    hold = holds.of(existing)
    if hold is None:
        return None
    declared = holds.declared_state(spec)
    if declared != holds.declared_state(existing.spec):
        what = f"an apply ends it: the manifest's state {declared} wins"
    else:
        what = f"an apply leaves it {hold.state} (the manifest says {declared})"
    return f"# {label}: {hold.describe()}; {what}"
