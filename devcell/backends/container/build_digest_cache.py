"""The build digest's cache: a walk with lstat only decides whether a context changed, so a
resync of a built cell whose context did not change costs a walk, never a hash of every file
or docker-py's `.dockerignore` matcher (22 s for a 100,000-file context, on every reconcile).

As git's index does, every file and directory of the context is known by its lstat
signature (path, type and mode, size, mtime_ns, ctime_ns, inode, device): a changed file
changes its mtime and ctime (ctime cannot be set back by a user), an entry added or removed
changes its directory's. The signatures of the whole tree (and of a Dockerfile outside it),
the `.dockerignore`'s and the Dockerfile's paths, the args and the target make one key; the
cache keeps the digest last computed for each cell's key. Any difference means the full
digest is computed again, so the digest's value is exactly what `container_build.digest`
computes.

Racy entries (changed within RACY_SECONDS before the walk, where a second change could keep
the same timestamps on a coarse filesystem) make the result uncacheable, as git refuses to
trust an index entry as new as the index.

The cache lives in the state directory (`build-digests/<cell>.json`, 0600, read without
following links and bounded): nothing a cell can write. Each entry names the cell id it was
computed for, so it never outlives its cell: the cell's deletion forgets it, and the orphan
sweep and `devcell gc` prune the entries of cells the database no longer has (a deletion that
found no runtime to delete, a crash, an entry from before ids were recorded).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcell import safeio

VERSION = 1
DIRECTORY = "build-digests"
RACY_SECONDS = 2.0
_LIMIT = 64 * 1024
_TMP_STALE_SECONDS = 3600.0


def tree_key(build: dict[str, Any]) -> tuple[str, bool]:
    """The key of `build`'s context as it is now (a walk with lstat, links never followed),
    and whether it may be cached (no racy entry)."""
    context = str(build["context"])
    h = hashlib.sha256()
    h.update(repr((VERSION, context, str(build.get("dockerfile", "Dockerfile")),
                   sorted((build.get("args") or {}).items()), build.get("target"))).encode())
    newest = 0
    stack = [""]
    root = os.lstat(context)
    h.update(_signature(".", root))
    # Directory order as the filesystem lists it, unsorted: for an unchanged directory it
    # is the same every time, and an order that moved only costs a full digest (a miss).
    while stack:
        rel_dir = stack.pop()
        prefix = rel_dir + "/" if rel_dir else ""
        lines = []
        with os.scandir(context + "/" + rel_dir if rel_dir else context) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                mtime, ctime = st.st_mtime_ns, st.st_ctime_ns
                lines.append(f"{prefix}{entry.name}\0{st.st_mode}\0{st.st_size}\0{mtime}\0"
                             f"{ctime}\0{st.st_ino}\0{st.st_dev}\n")
                if mtime > newest:
                    newest = mtime
                if ctime > newest:
                    newest = ctime
                if entry.is_dir(follow_symlinks=False):
                    stack.append(prefix + entry.name)
        h.update("".join(lines).encode("utf-8", "surrogateescape"))
    dockerfile = str(build.get("dockerfile", "Dockerfile"))
    outside = os.path.join(context, dockerfile)
    if os.path.relpath(outside, context).startswith(".."):  # -f ../Dockerfile
        st = os.stat(outside)  # what docker-py reads: through a link
        h.update(_signature(dockerfile, st))
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
    racy = newest >= time.time_ns() - int(RACY_SECONDS * 1e9)
    return h.hexdigest(), not racy


def _signature(rel: str, st: os.stat_result) -> bytes:
    return (f"{rel}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0"
            f"{st.st_ino}\0{st.st_dev}\n").encode("utf-8", "surrogateescape")


class DigestCache:
    """The last digest computed for each cell of one state directory, by its tree key."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = state_dir / DIRECTORY

    def _path(self, cell_name: str) -> Path:
        if not cell_name or "/" in cell_name or cell_name.startswith("."):
            raise ValueError(f"not a cell name: {cell_name!r}")
        return self.directory / f"{cell_name}.json"

    def _read(self, path: Path) -> dict[str, Any] | None:
        return safeio.read_json_object(path, _LIMIT)

    def get(self, cell_name: str, key: str) -> str | None:
        data = self._read(self._path(cell_name))
        if data is not None and data.get("key") == key and isinstance(data.get("digest"), str):
            return str(data["digest"])
        return None

    def forget(self, cell_name: str) -> None:
        """Drop the cell's entry (its cell is deleted), and any write of it a kill left."""
        path = self._path(cell_name)
        path.unlink(missing_ok=True)
        for tmp in self._entries(f".{path.name}.*.tmp"):
            tmp.unlink(missing_ok=True)

    def prune(self, live_cell_ids: frozenset[str]) -> list[str]:
        """Drop every entry whose cell is not among `live_cell_ids` (an entry that names no
        cell id, an unreadable one) and writes a kill left an hour ago or more; returns the
        names of the entries dropped."""
        dropped = []
        for path in self._entries("*.json"):
            data = self._read(path)
            if data is None or data.get("cell_id") not in live_cell_ids:
                path.unlink(missing_ok=True)
                dropped.append(path.stem)
        stale = time.time() - _TMP_STALE_SECONDS  # a younger one may be a put under way
        for tmp in self._entries(".*.tmp"):
            try:
                if tmp.lstat().st_mtime < stale:
                    tmp.unlink()
            except FileNotFoundError:
                pass
        return dropped

    def _entries(self, pattern: str) -> list[Path]:
        """Files of the cache directory matching `pattern` (a link among them is itself
        removed, never followed); none when the directory is missing or a link."""
        if self.directory.is_symlink() or not self.directory.is_dir():
            return []
        return list(self.directory.glob(pattern))

    def put(self, cell_name: str, key: str, digest: str, *, cell_id: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self._path(cell_name)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps({"version": VERSION, "cell_id": cell_id, "key": key,
                                "digest": digest}).encode())
        os.replace(tmp, path)

    def digest(self, cell_name: str, build: dict[str, Any],
               compute: Callable[[dict[str, Any]], str], *, cell_id: str) -> str:
        """`compute(build)`, or the digest it gave for this very tree last time; the entry
        written names `cell_id`, the cell it belongs to (prune() keeps only live cells')."""
        try:
            key, cacheable = tree_key(build)
        except OSError:
            return compute(build)  # compute() names the unreadable context
        found = self.get(cell_name, key)
        if found is not None:
            return found
        value = compute(build)
        if cacheable:
            try:
                again, still = tree_key(build)  # changed while it was hashed: not cached
            except OSError:
                return value
            if again == key and still:
                self.put(cell_name, key, value, cell_id=cell_id)
        return value
