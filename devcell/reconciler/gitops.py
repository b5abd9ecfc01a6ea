"""Keep a directory of manifests recorded as desired state, tolerating bad files.

Unlike `devcell apply` (all or nothing), a GitOps sync applies every good file and sets the
bad ones aside: an unparseable, invalid or empty file keeps the last good state of its objects
and is reported, and nothing is pruned while any file is bad. Objects whose documents are gone
are pruned only if they stay gone for `prune_grace` seconds, so a half-written file never
means "delete everything".

Two ways to sync, with the same outcome. `sync()` reads the whole directory: at the daemon's
start and at each periodic resync. `sync_paths()` reads only the paths the watcher named, so
an edit costs what changed, not the size of the directory. What that needs to stay exact is
kept in memory and rebuilt by every full sync: the digest of every file as last read, the
files that are bad (retried with every batch: another file may fix them), and the objects
whose manifest is gone (each with its prune clock). A batch is read together with every file
that holds an object the batch defines (and, in a full sync of several parts, every other file
of the directory defining it), so an object defined twice is decided as one apply of the
whole directory decides it (`_duplicates`: the outcome depends on the directory's content and
on what was recorded before the sync, never on how the sync was cut into batches). What the
incremental path cannot follow exactly (the directory itself named, a very large batch)
becomes a full sync; a full sync reports the files whose change no batch had brought
(`SyncResult.unseen`), so lost events are repaired and said to be.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from devcell import admission, config
from devcell.errors import ConfigError, ManifestError, NotFound, Problem, StateError
from devcell.manifests import loader
from devcell.manifests.model import Manifest, SourceFile
from devcell.store import desired, objects, prunes, sources
from devcell.store.db import Database

SETTLE = 2.0
"""Seconds without an event a replaced or emptied directory must stay before anything is
pruned from it (at least the prune grace)."""
MAX_EXCLUSION_PASSES = 20
MAX_OWNER_ROUNDS = 8
MIN_FULL_BATCH = 64
"""A batch of more files than this and than a quarter of the known files (or than a part, see
below) is read as a full sync: past that point one walk costs less than many single reads."""
FULL_PART = 500
"""A full sync applies the directory this many files at a time, in walk order, as batches:
parsing 10,000 manifests for one apply would hold ~160 MB of parsed documents. The outcome
is the same as one apply of everything: a part is read with the files that hold objects it
defines, and a file refused for naming an object of a later part is retried with each part."""

Key = tuple[str, str]
ParseCache = dict[str, tuple[list[Manifest], list[Problem]]]


@dataclass
class SyncResult:
    changes: list[desired.Change] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    pruned: list[desired.Change] = field(default_factory=list)
    prune_pending: int = 0
    full: bool = False
    refused: list[str] = field(default_factory=list)
    """Prunes the store refused this sync for a new reason (a snapshot a live fork still
    names): each stays pending, is retried by every later sync and is reported once."""
    unseen: dict[str, str] = field(default_factory=dict)
    """Full syncs: manifest files added, changed or deleted since the previous sync saw them,
    that no incremental sync was told about (path -> "added" | "changed" | "deleted")."""
    held: str = ""
    """Set when prunes start being held because the directory holds no manifest file at all
    (said once per hold): what was kept and how to let an empty directory prune."""

    @property
    def to_reconcile(self) -> list[tuple[str, str]]:
        keys = desired.ApplyResult(self.changes + self.pruned).to_reconcile
        return list(dict.fromkeys(keys))


@dataclass
class _Gone:
    """An object whose manifest is gone: where it came from, and since when (None while the
    prune clock is stopped because some file is bad)."""

    source: str
    since: float | None = None
    refused: str = ""  # why the store last refused its prune (reported once)


@dataclass(frozen=True)
class _Recorded:
    """What a live object had been applied from before this sync wrote anything."""

    source: str
    manifest_hash: str


@dataclass
class _Batch:
    present: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)


@dataclass
class _Applied:
    changes: list[desired.Change]
    problems: list[Problem]
    read: set[str]
    stray: bool  # a problem no file of the batch can be blamed for


@dataclass
class DirectorySync:
    db: Database
    root: Path
    prune_grace: float = 0.5
    full_part: int = FULL_PART
    allow_empty: bool = False
    """Whether a directory holding no manifest file may prune what it defined (Argo CD's
    `allowEmpty`): off, an emptied directory is taken for a checkout or a copy in progress
    (`rm -rf m; mkdir m; cp ... m/` deleted every cell and its workspace)."""
    keep_pruned: int = prunes.DEFAULT_KEEP_SECONDS
    """Seconds a pruned cell's workspace is kept as a safety snapshot (0: not kept)."""
    _missing: dict[Key, _Gone] = field(default_factory=dict)
    _holding: bool = False
    _root_id: tuple[int, int] | None = None  # the directory's (device, inode) at the last sync
    _settling: bool = False
    """The directory was replaced or emptied: until it has been quiet for the grace (no
    event; at least SETTLE seconds), a checkout or a copy is taken to be still writing it,
    and nothing is pruned."""
    _last_change: float = 0.0
    _bad: set[str] = field(default_factory=set)
    _seen: dict[str, str] = field(default_factory=dict)
    _dirs: set[str] = field(default_factory=set)  # directories that held a file of _seen
    _exact: bool = False  # the last sync left a state an incremental sync can build on
    _before: dict[Key, _Recorded | None] = field(default_factory=dict)
    """Objects defined twice: what each was applied from when this sync started (a full sync
    in parts writes between its parts; the duplicate rule must not see those writes)."""
    _definers: dict[Key, set[str]] = field(default_factory=dict)
    """A full sync in parts: the files of the directory defining each object defined more
    than once (each part is read with all of them)."""

    @property
    def _root(self) -> str:
        return os.path.abspath(self.root)

    def sync(self) -> SyncResult:
        """Read the whole directory and apply it."""
        result = SyncResult(full=True)
        if not self._config_ok(result):
            return result
        root = self._root
        before, self._seen, self._dirs, self._bad = self._seen, {}, set(), set()
        paths, result.problems = _listing(root)
        self._before = {}
        self._definers = self._index(paths) if len(paths) > self.full_part else {}
        self._note_before(self._definers)
        try:
            return self._sync_parts(result, paths, before)
        finally:
            self._before, self._definers = {}, {}

    def _sync_parts(self, result: SyncResult, paths: list[str], before: dict[str, str]
                    ) -> SyncResult:
        root = self._root
        changes: dict[Key, desired.Change] = {}
        stray, last = False, None
        for start in range(0, len(paths), self.full_part):
            last = self._apply_batch(_Batch(set(paths[start:start + self.full_part])))
            if last is None:  # owners beyond owners: apply everything at once
                self._seen, self._bad = {}, set()
                last = self._apply_batch(_Batch(set(paths)))
                assert last is not None  # every file is in it: no one else owns anything
            changes.update(((c.kind, c.name), c) for c in last.changes)
            stray = stray or last.stray
        if last is not None:
            result.problems += last.problems  # the last part retried every file still bad
        result.changes = list(changes.values())
        if self._exact:
            result.unseen = _differences(before, self._seen)
        self._note_replaced(changed=bool(_differences(before, self._seen)))
        self._exact = not stray and all(p.file in self._bad for p in result.problems)
        live = objects.live_under(self.db.conn, root)
        self._prune({k: src for k, src in live.items()
                     if k not in changes and src not in self._bad}, result)
        return result

    def sync_paths(self, paths: Iterable[str]) -> SyncResult:
        """Read only `paths` (as the watcher reported them), and the files that are bad."""
        paths = set(paths)
        largest = min(self.full_part, max(MIN_FULL_BATCH, len(self._seen) // 4))
        batch = self._expand(paths) if self._exact and len(paths) <= largest else None
        if batch is None or len(batch.present) + len(batch.gone) > largest:
            return self._fallback()
        result = SyncResult()
        if not self._config_ok(result):
            return result
        self._note_replaced(changed=bool(paths))
        self._before = {}
        applied = self._apply_batch(batch)
        if applied is None:
            return self._fallback()
        result.changes, result.problems = applied.changes, applied.problems
        self._exact = not applied.stray
        keep = {(c.kind, c.name) for c in applied.changes}
        look = (applied.read | batch.gone) - self._bad
        wanted = look | {g.source for g in self._missing.values()}
        live = objects.live_from(self.db.conn, wanted)
        self._prune({k: src for k, src in live.items() if k not in keep and (
            src in look or (k in self._missing and self._missing[k].source == src))}, result)
        return result

    def _fallback(self) -> SyncResult:
        result = self.sync()
        result.unseen = {}  # the batch that was not followed file by file, not lost events
        return result

    def _config_ok(self, result: SyncResult) -> bool:
        try:
            config.load(self.db.state_dir)
        except ConfigError as exc:  # a broken configuration: apply nothing, prune nothing
            result.problems.extend(exc.problems)
            self._exact = False  # the files changed meanwhile are read by the next full sync
            return False
        return True

    def _expand(self, paths: set[str]) -> _Batch | None:
        """The manifest files behind the reported paths, by the rules of `loader.walk`; None
        when that cannot be said exactly (the directory itself was named)."""
        root = self._root
        batch = _Batch()
        for raw in paths:
            path = os.path.abspath(raw)
            if not path.startswith(root + os.sep):
                return None
            parts = path[len(root) + 1:].split(os.sep)
            if any(loader.hidden(p) for p in parts) or _behind_link(root, parts):
                continue  # the walk never reaches it
            if os.path.isdir(path):
                listed = set(loader.walk(path)) if not os.path.islink(path) else set()
                batch.present |= listed
                batch.gone |= {p for p in self._known_at(path) if p not in listed}
            elif os.path.lexists(path):
                if loader.manifest_name(parts[-1]):
                    batch.present.add(path)
                batch.gone |= {p for p in self._known_at(path) if p != path}
            else:
                batch.gone |= set(self._known_at(path))
        return batch

    def _known_at(self, path: str) -> list[str]:
        """Files last seen at `path` or below it (a directory deleted, moved or replaced)."""
        known = [path] if path in self._seen else []
        if path not in self._dirs:
            return known
        prefix = path + os.sep
        return known + [p for p in self._seen if p.startswith(prefix)]

    def _apply_batch(self, batch: _Batch) -> _Applied | None:
        """Read and apply a batch with the files that are bad; remember what was read."""
        for path in self._bad:  # retried each time: another file may have fixed them
            (batch.present if _is_file(path) else batch.gone).add(path)
        cache: ParseCache = {}
        problems: list[Problem] = []
        files = self._read_batch(batch, cache, problems)
        if files is None:
            return None
        for path in batch.gone:
            self._seen.pop(path, None)
        self._seen.update((f.key, f.digest) for f in files)
        self._seen.update((p.file, "") for p in problems if p.file in batch.present)
        for path in batch.present:
            self._remember_dirs(path)
        changes = self._apply(files, problems, cache)
        self._bad = {p.file for p in problems if p.file in batch.present}
        return _Applied(changes, problems, set(batch.present),
                        any(p.file not in batch.present for p in problems))

    def _remember_dirs(self, path: str) -> None:
        root, here = self._root, os.path.dirname(path)
        while here != root and here not in self._dirs and len(here) > len(root):
            self._dirs.add(here)
            here = os.path.dirname(here)

    def _read_batch(self, batch: _Batch, cache: ParseCache, problems: list[Problem]
                    ) -> list[SourceFile] | None:
        """Read the batch, adding every file that currently holds an object the batch defines
        (so "defined twice" is found as a full walk finds it); None: owners beyond owners."""
        root = self._root
        for _ in range(MAX_OWNER_ROUNDS):
            order = sorted(batch.present, key=lambda p: loader.walk_order(p[len(root) + 1:]))
            failed: list[Problem] = []
            try:
                files = loader.read_sources(order, regular_only=True)
            except ManifestError as exc:
                failed = exc.problems
                names = {p.file for p in failed}
                files = [f for f in _readable(order) if f.display not in names]
            owners = self._owners(files, cache) - batch.present - batch.gone
            owners = {p for p in owners if self._walked(p)}
            if not owners:
                problems.extend(failed)
                return files
            for path in owners:
                (batch.present if _is_file(path) else batch.gone).add(path)
        return None

    def _walked(self, path: str) -> bool:
        """Whether `loader.walk` of the root would list `path` (were it a file)."""
        root = self._root
        if not path.startswith(root + os.sep):
            return False
        parts = path[len(root) + 1:].split(os.sep)
        return (loader.manifest_name(parts[-1]) and not any(loader.hidden(p) for p in parts)
                and not _behind_link(root, parts))

    def _apply(self, files: list[SourceFile], problems: list[Problem], cache: ParseCache
               ) -> list[desired.Change]:
        """Apply every good file. Files that fail alone (empty, no objects, invalid, an
        object twice in the file) are set aside first; then, to a fixed point, the objects
        defined in two files are decided among the files left (`_duplicates`) and the rest
        is applied; a file the apply refuses (nothing written) is set aside and the
        duplicates are decided again without it. So a file refused for another reason never
        keeps an object from its other definitions, and the outcome is the same however the
        directory is cut into batches."""
        good = []
        for f in files:
            if not f.data.strip():
                problems.append(Problem(
                    f.display, "file is empty; keeping the last applied state of its objects "
                    "(delete the file to delete them)"))
            elif _holds_nothing(self.db, f, cache):
                problems.append(Problem(
                    f.display, "file holds no objects (only comments or empty documents); "
                    "keeping the last applied state of its objects (delete the file to "
                    "delete them)"))
            elif alone := _own_problems(f, cache):
                problems.extend(alone)
            else:
                good.append(f)
        self._note_before(_defined_twice(good, cache))
        twice: dict[str, list[Problem]] = {}
        for _ in range(MAX_EXCLUSION_PASSES):
            twice = self._duplicates(good, cache)
            applying = [f for f in good if f.display not in twice]
            try:
                changes = admission.apply(self.db, applying, parse_cache=cache,
                                          leaving_under=[str(self._root)]).changes
            except ManifestError as exc:
                problems.extend(exc.problems)
                bad = {p.file for p in exc.problems} & {f.display for f in applying}
                if not bad:
                    break  # a problem no file can be blamed for: change nothing
                good = [f for f in good if f.display not in bad]
                continue
            problems.extend(p for found in twice.values() for p in found)
            return changes
        problems.extend(p for found in twice.values() for p in found)
        return []

    def _note_before(self, keys: Iterable[Key]) -> None:
        """Remember, before anything of this sync writes them, what `keys` were applied from."""
        for kind, name in keys:
            if (kind, name) not in self._before:
                found = objects.get(self.db.conn, kind, name)
                self._before[(kind, name)] = (
                    _Recorded(found.source or "", found.manifest_hash)
                    if found is not None and not found.deleting else None)

    def _duplicates(self, good: list[SourceFile], cache: ParseCache) -> dict[str, list[Problem]]:
        """The files of `good` (in walk order) set aside because another file keeps an
        object they define, with why. Each object defined in several files is kept by one:
        the file it was applied from (as recorded when the sync started) if that file still
        defines it; else, when the file it was applied from no longer defines it (moved or
        renamed beside a duplicate), the one definition identical to what was applied; else
        the first definition in walk order. Every other definition sets its file aside. A
        file that is set aside keeps nothing: an object it would keep is decided again
        among the files left, so its other definitions get their chance (repeated to a
        fixed point; when every keeper is itself set aside, all losers go at once)."""
        definitions: dict[Key, list[Manifest]] = {}
        for f in good:
            for m in cache[f.digest + f.key][0]:
                definitions.setdefault((m.kind, m.name), []).append(m)
        out: dict[str, list[Problem]] = {}
        while True:
            contested = {key: left for key, found in definitions.items()
                         if len(left := [m for m in found if m.file not in out]) > 1}
            if not contested:
                return out
            kept = {key: self._keeper(key, found) for key, found in contested.items()}
            losing = {m.file for key, found in contested.items() for m in found
                      if m is not kept[key][0]}
            firm = [key for key in contested if kept[key][0].file not in losing] or list(
                contested)
            for key in firm:
                keeper, why = kept[key]
                for m in contested[key]:
                    if m is not keeper:
                        out.setdefault(m.file, []).append(
                            desired.problem_at(m, ("metadata", "name"), why))

    def _keeper(self, key: Key, found: list[Manifest]) -> tuple[Manifest, str]:
        """Which of `found` (several definitions of one object, in walk order) keeps it, and
        the message for the others (naming the keeper's file and line)."""
        kind, name = key
        keeper, why = found[0], "where it was applied from"
        recorded = self._before.get(key)
        if recorded is not None:
            own = [m for m in found if m.source == recorded.source]
            same = [m for m in found
                    if m.manifest_hash(self.db.hash_key) == recorded.manifest_hash]
            if len(own) == 1:
                keeper = own[0]
            elif not own and len(same) == 1:
                keeper, why = same[0], f"as it was applied from {recorded.source}"
        if keeper is found[0]:  # the rule of one apply: the first definition in walk order
            return keeper, (f'{kind} "{name}" {admission.DEFINED_TWICE} '
                            f"(also in {keeper.file}:{keeper.line})")
        return keeper, (f'{kind} "{name}" is already defined in {keeper.file}:{keeper.line}, '
                        f"{why}; this definition is not applied (remove one)")

    def _note_replaced(self, *, changed: bool) -> None:
        try:
            st = os.stat(self._root)
            root_id: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            root_id = None
        if self._root_id is not None and root_id != self._root_id:
            self._settling = True  # `rm -rf m; mkdir m; cp ... m/`, a checkout's swap
        self._root_id = root_id
        if changed:
            self._last_change = time.monotonic()

    def _unsettled(self, now: float) -> bool:
        if self._settling and now - self._last_change < max(self.prune_grace, SETTLE):
            return True
        self._settling = False
        return False

    def _hold_empty(self, result: SyncResult) -> bool:
        """Whether prunes are held because the directory holds no manifest file at all (and
        an empty directory is not allowed to prune): said once per hold, in `result.held`."""
        empty = bool(self._missing) and not self.allow_empty and not self._seen
        if empty and not self._holding:
            result.held = (
                f"the manifests directory {self._root} holds no manifest file: the "
                f"{len(self._missing)} object(s) it defined are kept, not pruned (an emptied "
                "directory is taken for a checkout or a copy in progress; run the daemon "
                "with --allow-empty to let an empty directory delete them)")
        if self._holding and not empty:
            self._settling = True  # files again: let the copy that brings them finish
        self._holding = empty
        return empty

    def _index(self, paths: list[str]) -> dict[Key, set[str]]:
        """A full sync in parts: the files defining each object defined in more than one
        file, so every part is read with all of an object's definitions (else a part would
        record an object that a later part's file defines too). A file applied as it is now
        is not parsed (its objects were recorded then), a changed one only for its kinds and
        names."""
        from devcell.manifests import validate  # only for a directory of several parts

        seen: dict[Key, set[str]] = {}
        conn, key = self.db.conn, self.db.hash_key
        for start in range(0, len(paths), self.full_part):
            part = paths[start:start + self.full_part]
            try:
                files = loader.read_sources(part, regular_only=True)
            except ManifestError:  # one unreadable file: read the others one by one
                files = _readable(part)
            recorded = sources.recorded(conn, [f.key for f in files])
            for f in files:
                if f.key in recorded and recorded[f.key][0] == sources.seal(key, f.digest):
                    found = [(kind, name) for kind, name, _ in recorded[f.key][1]]
                else:
                    found = validate.object_keys(f)
                for defined in found:
                    seen.setdefault(defined, set()).add(f.key)
        return {defined: files for defined, files in seen.items() if len(files) > 1}

    def _owners(self, files: list[SourceFile], cache: ParseCache) -> set[str]:
        """Where the live objects that `files` define were last applied from, and (a full
        sync in parts) the other files of the directory defining them."""
        names: dict[str, set[str]] = {}
        owners: set[str] = set()
        for keys in _defined(self.db, files, cache).values():
            for kind, name in keys:
                names.setdefault(kind, set()).add(name)
                owners.update(self._definers.get((kind, name), ()))
        for kind, wanted in names.items():
            owners.update(objects.sources_of(self.db.conn, kind, wanted))
        return owners

    def _prune(self, candidates: dict[Key, str], result: SyncResult) -> None:
        """`candidates` (object -> its source) are every object this sync knows to have lost
        its manifest; prune those gone for `prune_grace`, never while any file is bad."""
        before = self._missing
        self._missing = {k: before[k] if k in before and before[k].source == src else _Gone(src)
                         for k, src in candidates.items()}
        if result.problems or self._hold_empty(result):
            for gone in self._missing.values():
                gone.since = None  # the grace starts again once every file is good
            return
        now = time.monotonic()
        for (kind, name), gone in sorted(self._missing.items()):
            gone.since = now if gone.since is None else gone.since
            if now - gone.since < self.prune_grace or self._unsettled(now):
                result.prune_pending += 1
                continue
            try:
                result.pruned.append(desired.delete(self.db, kind, name, reason="Pruned",
                                                    keep_pruned=self.keep_pruned))
            except NotFound:  # deleted meanwhile by someone else: nothing left to prune
                pass
            except StateError as exc:
                # Refused (a snapshot that a live fork still names): the daemon keeps
                # running, the object stays pending and every later sync tries again.
                if gone.refused != str(exc):
                    gone.refused = str(exc)
                    result.refused.append(f"{kind.lower()}/{name}: {exc}")
                continue
            del self._missing[(kind, name)]


def _listing(root: str) -> tuple[list[str], list[Problem]]:
    """The manifest files of the directory, or why there are none to trust."""
    if os.path.isdir(root):
        return loader.walk(root), []
    reason = "not a directory" if os.path.exists(root) else "no such file or directory"
    return [], [Problem(root, reason)]


def _readable(paths: list[str]) -> list[SourceFile]:
    out = []
    for path in paths:
        try:
            out.extend(loader.read_sources([path], regular_only=True))
        except ManifestError:
            continue
    return out


def _is_file(path: str) -> bool:
    """What the walk lists as a file: anything but a directory (a broken link included)."""
    return os.path.lexists(path) and not os.path.isdir(path)


def _behind_link(root: str, parts: list[str]) -> bool:
    """Whether a directory between `root` and the entry is a symlink (the walk does not
    follow them)."""
    here = root
    for part in parts[:-1]:
        here = os.path.join(here, part)
        if os.path.islink(here):
            return True
    return False


def _differences(before: dict[str, str], now: dict[str, str]) -> dict[str, str]:
    out = {p: "deleted" for p in before if p not in now}
    for path, digest in now.items():
        if path not in before:
            out[path] = "added"
        elif before[path] != digest:
            out[path] = "changed"
    return dict(sorted(out.items()))


def _defined(db: Database, files: list[SourceFile], cache: ParseCache
             ) -> dict[str, list[Key]]:
    """The objects each file defines. A file whose bytes were applied before is not parsed:
    what it defined was recorded then."""
    recorded = sources.recorded(db.conn, [f.key for f in files])
    out: dict[str, list[Key]] = {}
    for f in files:
        if f.key in recorded and recorded[f.key][0] == sources.seal(db.hash_key, f.digest):
            out[f.key] = [(kind, name) for kind, name, _ in recorded[f.key][1]]
        elif f.data.strip():
            from devcell.manifests import validate  # only when a changed file is read

            if f.digest + f.key not in cache:
                cache[f.digest + f.key] = validate.parse_source(f, desired.validator_place(db))
            out[f.key] = [(m.kind, m.name) for m in cache[f.digest + f.key][0]]
    return out


def _own_problems(f: SourceFile, cache: ParseCache) -> list[Problem]:
    """Why a file fails alone, whatever the other files hold: invalid, or an object defined
    twice in it (the second definition is blamed, naming the first's line)."""
    found, bad = cache[f.digest + f.key]
    out = list(bad)
    first: dict[Key, Manifest] = {}
    for m in found:
        if (m.kind, m.name) in first:
            was = first[(m.kind, m.name)]
            out.append(desired.problem_at(m, ("metadata", "name"),
                                          f'{m.kind} "{m.name}" {admission.DEFINED_TWICE} '
                                          f"(also in {was.file}:{was.line})"))
        else:
            first[(m.kind, m.name)] = m
    return out


def _defined_twice(files: list[SourceFile], cache: ParseCache) -> set[Key]:
    seen: set[Key] = set()
    twice: set[Key] = set()
    for f in files:
        for key in {(m.kind, m.name) for m in cache[f.digest + f.key][0]}:
            (twice if key in seen else seen).add(key)
    return twice


def _holds_nothing(db: Database, f: SourceFile, cache: ParseCache) -> bool:
    """A file that parses cleanly to no object at all (comments, `---`): like an empty file,
    it keeps its objects rather than pruning them (a half-saved edit must not delete)."""
    from devcell.manifests import validate  # only when a changed file is read

    if f.digest + f.key not in cache:
        cache[f.digest + f.key] = validate.parse_source(f, desired.validator_place(db))
    found, bad = cache[f.digest + f.key]
    return not found and not bad
