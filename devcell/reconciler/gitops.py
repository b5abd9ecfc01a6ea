"""Keep a directory of manifests recorded as desired state, tolerating bad files.

Unlike `devcell apply` (all or nothing), a GitOps sync applies every good file and sets the
bad ones aside: an unparseable, invalid or empty file keeps the last good state of its objects
and is reported, and nothing is pruned while any file is bad. Objects whose documents are gone
are pruned only if they stay gone for `prune_grace` seconds, so a half-written file never
means "delete everything".
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from devcell import admission, config
from devcell.errors import ConfigError, ManifestError, Problem
from devcell.manifests import loader
from devcell.manifests.model import SourceFile
from devcell.store import desired
from devcell.store.db import Database

MAX_EXCLUSION_PASSES = 20


@dataclass
class SyncResult:
    changes: list[desired.Change] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    pruned: list[desired.Change] = field(default_factory=list)
    prune_pending: int = 0

    @property
    def to_reconcile(self) -> list[tuple[str, str]]:
        keys = desired.ApplyResult(self.changes + self.pruned).to_reconcile
        return list(dict.fromkeys(keys))


@dataclass
class DirectorySync:
    db: Database
    root: Path
    prune_grace: float = 0.5
    _missing_since: dict[tuple[str, str], float] = field(default_factory=dict)

    def sync(self) -> SyncResult:
        result = SyncResult()
        try:
            config.load(self.db.state_dir)
        except ConfigError as exc:  # a broken configuration: apply nothing, prune nothing
            result.problems.extend(exc.problems)
            return result
        root = str(self.root.absolute())
        try:
            files = loader.read_sources([root])
        except ManifestError as exc:  # oversize or unreadable files: skip those, keep the rest
            result.problems.extend(exc.problems)
            bad_names = {p.file for p in exc.problems}
            files = [f for f in self._readable(root) if f.display not in bad_names]
        good, problems = self._exclude_bad(files)
        result.problems.extend(problems)
        try:
            applied = admission.apply(self.db, good)
        except ManifestError as exc:  # should not happen after exclusion; report, change nothing
            result.problems.extend(exc.problems)
            return result
        result.changes = applied.changes
        if result.problems:
            self._missing_since.clear()  # prune nothing while any file is bad
            return result
        keep = {(c.kind, c.name) for c in applied.changes}
        candidates = desired.prune_candidates(self.db.conn, [root], keep)
        now = time.monotonic()
        keys = {(c.kind, c.name) for c in candidates}
        for key in list(self._missing_since):
            if key not in keys:
                del self._missing_since[key]
        for change in candidates:
            first = self._missing_since.setdefault((change.kind, change.name), now)
            if now - first < self.prune_grace:
                result.prune_pending += 1
                continue
            result.pruned.append(desired.delete(self.db, change.kind, change.name, reason="Pruned"))
            del self._missing_since[(change.kind, change.name)]
        return result

    def _readable(self, root: str) -> list[SourceFile]:
        out = []
        for path in loader.walk(root):
            try:
                out.extend(loader.read_sources([path]))
            except ManifestError:
                continue
        return out

    def _exclude_bad(self, files: list[SourceFile]) -> tuple[list[SourceFile], list[Problem]]:
        """Drop files with problems until the rest applies cleanly (dry run)."""
        problems: list[Problem] = []
        good = []
        for f in files:
            if not f.data.strip():
                problems.append(Problem(f.display, "file is empty; keeping the last applied "
                                        "state of its objects (delete the file to delete them)"))
            else:
                good.append(f)
        for _ in range(MAX_EXCLUSION_PASSES):
            try:
                admission.apply(self.db, good, dry_run=True)
                return good, problems
            except ManifestError as exc:
                problems.extend(exc.problems)
                bad = {p.file for p in exc.problems}
                good = [f for f in good if f.display not in bad]
        return [], problems
