"""What a new workspace starts with (`spec.workspace.source`): a git repository cloned
(git_source.py), a directory of this host copied in once, or the files of a snapshot archive
(`devcell snapshot export`) read as an import reads them. (A host folder bound live is no
seed: host/live_folder.py.)

A directory is the developer's, under the host-path rules of DevCell's configuration (the
same `security.allowedHostPaths` a host mount needs): judged at admission and again here,
when the workspace is made, and copied from the path it resolves to then, so a link swapped
in since admission is refused rather than followed. The copy is the checkpoint copy's
(`treecopy.copy_tree`, `cp -a` semantics: links stay links, never followed); the source is
only read, never changed or removed.

An archive is the same file `snapshot import` takes; it is judged here like a directory and
unpacked by archives/unpack.py (the archives package lies above these host tools).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcell import names
from devcell.backends.host import git_source, treecopy
from devcell.errors import BackendRefused


@dataclass(frozen=True)
class DirectorySource:
    path: str

    @property
    def shown(self) -> str:
        return names.printable(self.path)


@dataclass(frozen=True)
class ArchiveSource:
    path: str

    @property
    def shown(self) -> str:
        return names.printable(self.path)


Seed = git_source.GitSource | DirectorySource | ArchiveSource


def of_spec(spec: dict[str, Any]) -> Seed | None:
    """The source a cell's spec gives its new workspace (None: none, or a fork's)."""
    workspace = spec.get("workspace") or {}
    if workspace.get("from") is not None:
        return None
    source = workspace.get("source") or {}
    if source.get("directory") is not None:
        return DirectorySource(str(source["directory"]["path"]))
    if source.get("archive") is not None:
        return ArchiveSource(str(source["archive"]["path"]))
    return git_source.of_spec(spec)


def checked(seed: Seed, state_dir: Path) -> Seed:
    """`seed` as it may be used now (a local path judged again, and resolved)."""
    if isinstance(seed, git_source.GitSource):
        return git_source.checked(seed, state_dir)
    from devcell import config, security

    doing = "copying" if isinstance(seed, DirectorySource) else "reading archive"
    problem = security.host_path_problem(seed.path.rstrip("/") or "/",
                                         config.load(state_dir).security, state_dir)
    if problem:
        raise BackendRefused(f"{doing} {seed.shown}: {problem}")
    resolved = os.path.realpath(seed.path)
    if isinstance(seed, ArchiveSource):
        if not os.path.isfile(resolved):
            raise BackendRefused(f"{doing} {seed.shown}: it is not a file (any more)")
        return ArchiveSource(resolved)
    if not os.path.isdir(resolved):
        raise BackendRefused(f"{doing} {seed.shown}: it is not a directory (any more)")
    return DirectorySource(resolved)


def fill(seed: git_source.GitSource | DirectorySource, into: Path, *, cell_name: str) -> None:
    """Make `into` (which must not exist) hold what `seed` gives (an ArchiveSource is
    unpacked by archives/unpack.py, which reads it as an import does)."""
    if isinstance(seed, git_source.GitSource):
        git_source.clone(seed, into)
        return
    treecopy.copy_tree(Path(seed.path), into,
                       description=f"{names.printable(cell_name)}: copying {seed.shown}")

