"""A workspace's git source (`spec.workspace.source.git`), cloned on the host by the host's
git into the directory a new workspace is being made in.

git itself speaks to the remote, with the host's configuration: credential helpers, ssh keys
and agents carry any credential, so none is ever in a manifest, the database, a log or an
event (a URL holding a password is refused at admission). git never prompts (no terminal,
GIT_TERMINAL_PROMPT=0, ssh in batch mode), runs under a deadline, and never hard-links a local
repository's objects into the workspace (a cell could otherwise rewrite the host's objects
through the shared inodes). Submodules are not fetched and no hook runs. A failed clone says
why in a word a user acts on (not found, access denied, unreachable, no such ref) with git's
last line, escaped; the caller removes what was being made, so no half-made workspace stays.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcell import names
from devcell.backends.host import children
from devcell.errors import BackendError, BackendRefused

CLONE_SECONDS = 600.0
_SHA = re.compile(r"[0-9a-f]{7,40}")
_CAUSES = (
    (re.compile(r"not found|does not appear to be a git repository|does not exist|"
                r"no such file", re.I), "the repository was not found"),
    (re.compile(r"authentication failed|permission denied|could not read username|"
                r"access denied|403", re.I), "access was denied (check the host's git "
                                             "credentials or ssh key)"),
    (re.compile(r"could not resolve|connection refused|timed out|unreachable|"
                r"connection reset|network|failed to connect|couldn't connect", re.I),
     "the remote could not be reached"),
)


@dataclass(frozen=True)
class GitSource:
    url: str
    ref: str | None
    depth: int | None

    @property
    def shown(self) -> str:
        return names.printable(self.url) + (f" at {names.printable(self.ref)}" if self.ref
                                            else "")


def of_spec(spec: dict[str, Any]) -> GitSource | None:
    """The git source a cell's spec gives its new workspace (None: none, or a fork)."""
    workspace = spec.get("workspace") or {}
    git = (workspace.get("source") or {}).get("git")
    if git is None or workspace.get("from") is not None:
        return None
    depth = git.get("depth")
    return GitSource(str(git["url"]), git.get("ref"), int(depth) if depth else None)


def clone(source: GitSource, into: Path) -> None:
    """Clone `source` into `into` (which must not exist), checked out at its ref."""
    sha = source.ref is not None and _SHA.fullmatch(source.ref) is not None
    argv = ["git", "clone", "--quiet", "--no-hardlinks", "--no-tags",
            "-c", "core.hooksPath=/dev/null"]
    if source.depth and not sha:
        argv += ["--depth", str(source.depth)]
    if source.ref and not sha:
        argv += ["--branch", source.ref, "--single-branch"]
    _git([*argv, "--", source.url, str(into)], source)
    if sha:
        _git(["git", "-C", str(into), "-c", "advice.detachedHead=false", "checkout", "--quiet",
              "--detach", str(source.ref), "--"], source)


def _git(argv: list[str], source: GitSource) -> None:
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false",
           "SSH_ASKPASS": "/bin/false", "LC_ALL": "C",
           "GIT_SSH_COMMAND": os.environ.get("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")}
    try:
        done = children.run_bytes(argv, env=env, timeout=CLONE_SECONDS)
    except FileNotFoundError:
        raise BackendError("git is not installed on this host; install it "
                           "(apt-get install -y git)") from None
    except children.TimeoutExpired:
        raise BackendError(f"cloning {source.shown} took over {CLONE_SECONDS:.0f} s; it was "
                           "stopped") from None
    if done.returncode == 0:
        return
    stderr = done.stderr.decode("utf-8", "replace")
    said = [line for line in stderr.strip().splitlines() if line.strip()]
    last = names.printable(said[-1][-300:]) if said else f"git exited {done.returncode}"
    if source.ref and re.search(r"remote branch .* not found|did not match any|"
                                r"reference is not a tree|not our ref|unknown revision|"
                                r"invalid reference",
                                stderr, re.I):
        raise BackendRefused(f"cloning {source.shown}: the ref {names.printable(source.ref)} "
                             f"is not in the repository (git: {last})")
    for pattern, why in _CAUSES:
        if pattern.search(stderr):
            cause = BackendRefused if "reached" not in why else BackendError
            raise cause(f"cloning {source.shown}: {why} (git: {last})")
    raise BackendError(f"cloning {source.shown} failed (git: {last})")
