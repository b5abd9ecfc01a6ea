"""The project folder as the workspace of an imported devcontainer.json.

A dev container binds the folder it was opened in at its workspace, so the project's files
(committed or not) are there and edits show on both sides. DevCell does the same when its
host-path rules allow the folder (security.allowedHostPaths), in one of two ways:

- a folder owned by a user other than root becomes `spec.workspace.source.hostPath`: bound
  live, the cell running as the folder's owner (what a dev container's remapped user is);
- a folder owned by root becomes `spec.workspace.source.directory`: copied in once when the
  cell is made, because a cell never runs as root on a writable host folder (it could leave
  setuid-root programs there) and hooks written for a dev container usually need root.

When the rules do not allow it, the caller falls back to a git clone, and failing that the
workspace is empty, with a warning naming the setting that would put the files there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcell import config, names, security


@dataclass(frozen=True)
class Folder:
    """The workspace source made of the folder, what is said of it, and who the cell's hooks
    run as (None: root)."""

    source: dict[str, Any]
    said: str
    runs_as: str | None


def choose(root: Path, policy: config.SecurityPolicy, state_dir: Path, *,
           live: bool = True) -> Folder | None:
    """The folder `root` as the workspace, or None when the host-path rules refuse it.
    `live` False: copied even when a user's (host commands run in it: a cell writing it
    could change what they run)."""
    path = os.path.normpath(str(root))
    if security.host_path_problem(path, policy, state_dir) is not None:
        return None
    try:
        owner = os.stat(path).st_uid
    except OSError:
        return None
    shown = names.printable(path)
    if owner != 0 and not live:
        return Folder({"directory": {"path": path}},
                      f"workspace: a copy of the folder {shown}, made when the cell is made "
                      "(initializeCommand runs on the host in it, so the cell may not write "
                      "it: bound live, the cell could change what runs on the host; later "
                      "edits stay on their side)", None)
    if owner != 0:
        return Folder({"hostPath": {"path": path}},
                      f"workspace: the folder {shown}, bound live as a dev container binds it "
                      f"(edits show on both sides; the cell runs as its owner, uid {owner})",
                      f"uid {owner}, the folder's owner")
    return Folder({"directory": {"path": path}},
                  f"workspace: a copy of the folder {shown}, made when the cell is made (the "
                  "folder is root's, and a cell never runs as root on a writable host folder; "
                  "later edits stay on their side)", None)


def empty_warning(root: Path, policy: config.SecurityPolicy) -> str:
    """Why the project's files are not in the cell, and what would put them there."""
    return (f"workspace: the project's files are not in the cell (its workspace starts empty): "
            f"allow {names.printable(str(root))} in security.allowedHostPaths of "
            f"{names.printable(str(policy.source))} to have the folder bound as the workspace, "
            "or push it to a git remote, which the import then clones")
