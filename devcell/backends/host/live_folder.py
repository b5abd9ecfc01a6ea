"""A workspace that is the developer's own folder, bound live (`spec.workspace.source.hostPath`).

A local dev container bind-mounts the project folder: the editor on the host and the tools in
the cell see the same files at once. A container cell with this source does the same: its
workspace volume holds no tree of its own (its marker records the folder), and the folder is
bind-mounted at `spec.workspace.mountPath` as a writable host mount, under the same rules
(`security.allowedHostPaths`, judged at admission, again here from the path it resolves to,
and again by the container backend before every start).

The folder is the developer's, never DevCell's: nothing DevCell removes (a cell's delete, a
prune, `gc`, the orphan sweep) ever reaches it, because it never lies in the state directory
(the host-path rules refuse one that overlaps it) and nothing in the state directory links to
it. It is only read by a checkpoint (the ordinary hostile-safe copy) and never written by
the host: a snapshot restore into it is refused (docs/security.md says why).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from devcell import names
from devcell.errors import BackendRefused
from devcell.records import Record

NEEDS_CONTAINER = "a live host folder needs the container backend; use directory: to copy it"
"""Why another backend refuses the source at admission (a vm's workspace is its own disk)."""
RESTORE_REFUSED = (
    "the workspace is the host folder {folder} (spec.workspace.source.hostPath), the "
    "developer's own files, which DevCell never overwrites: fork the snapshot into a new "
    "cell instead (devcell cell fork), or put files back with your own tools (git)")
"""Why `snapshot restore` into a live folder is refused, before anything is recorded."""
STORAGE = "live"
"""A volume marker's `storage` when its workspace is a folder bound live..."""
MARKER_KEY = "live_path"
"""...and the key holding that folder's resolved path."""


class LiveFolder(Record):
    """The host folder a cell's workspace is bound to, as its spec names it."""

    path: str

    @property
    def shown(self) -> str:
        return names.printable(self.path)


def of_spec(spec: dict[str, Any]) -> LiveFolder | None:
    """The folder a cell's spec binds as its workspace (None: none, or a fork's)."""
    workspace = spec.get("workspace") or {}
    if workspace.get("from") is not None:
        return None
    folder = (workspace.get("source") or {}).get("hostPath")
    return None if folder is None else LiveFolder(str(folder["path"]))


def checked(folder: LiveFolder, state_dir: Path) -> LiveFolder:
    """`folder` as it may be bound now: judged again by the host-path rules and resolved, so
    a link swapped in since admission is refused rather than followed."""
    from devcell import config, security

    problem = security.host_path_problem(folder.path.rstrip("/") or "/",
                                         config.load(state_dir).security, state_dir)
    if problem:
        raise BackendRefused(f"binding {folder.shown}: {problem}")
    resolved = os.path.realpath(folder.path)
    if not os.path.isdir(resolved):
        raise BackendRefused(f"binding {folder.shown}: it is not a directory (any more)")
    return LiveFolder(resolved)


def owner(path: Path) -> tuple[int, int]:
    """(uid, gid) owning the folder (not following a link): whom the cell runs as by default,
    so what it writes there is the developer's."""
    st = os.stat(path, follow_symlinks=False)
    return st.st_uid, st.st_gid


def recorded(marker: dict[str, Any] | None) -> Path | None:
    """The folder a volume's marker (volume.json) records as its live workspace, or None."""
    marker = marker or {}
    path = marker.get(MARKER_KEY) if marker.get("storage") == STORAGE else None
    return Path(path) if isinstance(path, str) and os.path.isabs(path) else None


def read_marker(path: Path) -> dict[str, Any] | None:
    """A volume marker read for `recorded` (DevCell's own file, never mounted in a cell);
    None when it is missing or damaged."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
