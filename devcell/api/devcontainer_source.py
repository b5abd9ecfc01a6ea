"""The workspace source `devcell import devcontainer` gives a cell: the repository the
devcontainer.json lies in, as a dev container tool opens the folder it was started in.

A devcontainer.json in a git work tree makes a Cell whose workspace is cloned from that
repository: its remote (origin, else the only one; credentials taken out, an scp-like
address written as ssh://), at the current branch (or the commit, when HEAD is detached).
With no remote, the repository on this host is cloned from its own path, which the host-path
rules must allow, as for any local clone; when they do not, the workspace is left empty
and the note says which setting would allow it. Outside a work tree nothing is chosen.
Whatever was chosen is said, so an import never picks a source silently.

git is asked only read-only plumbing questions (rev-parse, symbolic-ref, remote, config),
with no prompt and a short deadline; a repository git will not open (another owner's, a
broken one) counts as none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcell import config, names, security
from devcell.api import devcontainer_folder
from devcell.backends.host import children, git_source

GIT_SECONDS = 10.0


@dataclass(frozen=True)
class Chosen:
    """The source chosen (None: an empty workspace) and the sentences saying why."""

    git: dict[str, Any] | None
    said: str
    warnings: tuple[str, ...] = ()
    source: dict[str, Any] | None = None
    """spec.workspace.source when it is not a git clone (the folder, live or copied)."""
    runs_as: str | None = None
    """Who the cell's hooks run as when not root (a live folder's owner)."""


def choose(root: Path, policy: config.SecurityPolicy, state_dir: Path, *,
           live: bool = True) -> Chosen:
    """The workspace source for the project folder `root`: the folder itself when the
    host-path rules allow it (devcontainer_folder), else its repository's remote."""
    folder = devcontainer_folder.choose(root, policy, state_dir, live=live)
    if folder is not None:
        return Chosen(None, folder.said, source=folder.source, runs_as=folder.runs_as)
    top = _git(root, "rev-parse", "--show-toplevel")
    if not top:
        return Chosen(None, f"workspace: empty ({names.printable(str(root))} is not in a git "
                      "work tree)", (devcontainer_folder.empty_warning(root, policy),))
    ref, ref_said = _ref(root)
    remote = _remote(root)
    if remote is None:
        return _local(Path(top), ref, ref_said, policy, state_dir)
    name, raw = remote
    url, stripped = git_source.as_clone_url(raw)
    warnings: tuple[str, ...] = ()
    if stripped:
        warnings += (f"the URL of remote {names.printable(name)} holds credentials; they "
                     "were left out (git's credential helper or an ssh key provides them)",)
    said = (f"workspace: cloned from {names.printable(url)} (remote {names.printable(name)} "
            f"of {names.printable(top)}){ref_said}; changes not pushed are not in it")
    if ref is not None and not _on_remote(root, name, ref):
        warnings += (f"{names.printable(ref)} may not be on remote {names.printable(name)} "
                     "yet; push it before the cell is made",)
    return Chosen(_source(url, ref), said, warnings)


def _local(top: Path, ref: str | None, ref_said: str, policy: config.SecurityPolicy,
           state_dir: Path) -> Chosen:
    problem = security.host_path_problem(str(top), policy, state_dir)
    if problem:
        return Chosen(None, f"workspace: empty; the repository {names.printable(str(top))} "
                      "has no remote, and cloning it from its path is refused: "
                      f"{names.printable(problem)}",
                      (devcontainer_folder.empty_warning(top, policy),))
    said = (f"workspace: cloned from {names.printable(str(top))} (the repository has no "
            f"remote){ref_said}")
    return Chosen(_source(str(top), ref), said)


def _source(url: str, ref: str | None) -> dict[str, Any]:
    return {"url": url, **({"ref": ref} if ref else {})}


def _ref(root: Path) -> tuple[str | None, str]:
    """(the current branch, else HEAD's commit, else None; how it is said)."""
    branch = _git(root, "symbolic-ref", "--quiet", "--short", "HEAD")
    commit = _git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if branch and commit:
        return branch, f" at branch {names.printable(branch)}"
    if commit:
        return commit, f" at commit {commit} (HEAD is detached)"
    return None, " at its default branch (the repository has no commit yet)"


def _remote(root: Path) -> tuple[str, str] | None:
    """(name, URL) of origin, else of the only remote; None when there is none to pick."""
    listed = _git(root, "remote").split()
    name = "origin" if "origin" in listed else listed[0] if len(listed) == 1 else None
    if name is None:
        return None
    url = _git(root, "remote", "get-url", "--", name)
    return (name, url) if url else None


def _on_remote(root: Path, remote: str, ref: str) -> bool:
    """Whether `ref` (a branch or commit) is known to be on `remote` (as last fetched)."""
    if _git(root, "rev-parse", "--verify", "--quiet", f"refs/remotes/{remote}/{ref}"):
        return True
    return bool(_git(root, "branch", "--remotes", "--contains", ref, "--list", f"{remote}/*"))


def _git(root: Path, *args: str) -> str:
    """git's answer in `root` (stripped), or "" when it fails, is missing or is too slow."""
    env = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"}
    try:
        done = children.run_bytes(["git", "-C", str(root), *args], env=env,
                                  timeout=GIT_SECONDS)
    except (FileNotFoundError, children.TimeoutExpired):
        return ""
    if done.returncode != 0:
        return ""
    return done.stdout.decode("utf-8", "replace").strip()
