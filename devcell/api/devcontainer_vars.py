"""The devcontainer specification's variables, filled in when a devcontainer.json is imported.

A Cell manifest holds literal values, so every variable the specification lets a field use is
filled in once, at import, from this host: `${localEnv:VAR}` (and its older name
`${env:VAR}`) from the importing shell's environment, `${localEnv:VAR:default}` falling back
to `default` when VAR is unset (set and empty is empty, as the devcontainer CLI reads it),
the workspace's `${localWorkspaceFolder}`, `${containerWorkspaceFolder}` and their
`Basename` forms, and `${devcontainerId}`. A variable that is unset and has no default is refused by name (a
value silently made empty would be a different configuration), with one exception the
specification's own samples rely on: a value joining several host variables of which one is
set, such as `${localEnv:HOME}${localEnv:USERPROFILE}` (a home folder on every system), takes
the unset ones as empty.

`${containerEnv:VAR}` is the container's own environment, known only inside it: it is
reported, and the caller decides (remoteEnv leaves the entry to the image's environment and
says so). Anything else in `${...}` (a shell's `${HOME}`, an editor's `${workspaceFolder}`)
is left as written.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_REFERENCE = re.compile(r"\$\{(localEnv|env|containerEnv):([^}:]*)(?::([^}]*))?\}"
                        r"|\$\{(localWorkspaceFolder|localWorkspaceFolderBasename"
                        r"|containerWorkspaceFolder|containerWorkspaceFolderBasename"
                        r"|devcontainerId)\}")


@dataclass(frozen=True)
class Filled:
    """A value with the variables filled in, and what could not be."""

    text: str
    unset: tuple[str, ...] = ()
    """Host variables that are unset and have no default (`localEnv:NAME`): refuse the value."""
    container: tuple[str, ...] = ()
    """`${containerEnv:NAME}` references, left as written."""
    read: tuple[str, ...] = ()
    """Host variables whose values were filled in (a credential among them is said)."""


@dataclass(frozen=True)
class Variables:
    """What the variables are filled in with."""

    local_env: Mapping[str, str]
    workspace: Mapping[str, str]
    """localWorkspaceFolder, containerWorkspaceFolder, their Basename forms, devcontainerId."""

    def fill(self, value: str) -> Filled:
        """`value` with every variable this host knows filled in (see the module's text)."""
        refs = list(_REFERENCE.finditer(value))
        host = [m for m in refs if m.group(1) in ("localEnv", "env")]
        some_set = any(self.local_env.get(m.group(2)) for m in host)
        unset: list[str] = []
        container: list[str] = []
        read: list[str] = []

        def one(m: re.Match[str]) -> str:
            if m.group(4):
                return self.workspace.get(m.group(4), m.group(0))
            kind, name, default = m.group(1), m.group(2), m.group(3)
            if kind == "containerEnv":
                container.append(name)
                return m.group(0)
            found = self.local_env.get(name)
            if found is not None:  # set, even empty, as the devcontainer CLI reads it
                read.append(name)
                return found
            if default is not None:
                return default
            if not (some_set and len(host) > 1):
                unset.append(f"{kind}:{name}")
            return ""

        text = _REFERENCE.sub(one, value)
        return Filled(text, tuple(dict.fromkeys(unset)), tuple(dict.fromkeys(container)),
                      tuple(dict.fromkeys(read)))


def devcontainer_id(local_folder: Path, config_file: Path) -> str:
    """`${devcontainerId}`: stable for a project folder and its devcontainer.json, computed as
    the devcontainer CLI computes it (the SHA-256 of the JSON object of the two labels it
    gives a dev container, `devcontainer.config_file` and `devcontainer.local_folder`, keys
    sorted and no spaces, written in base 32 and padded to 52 characters), so a volume named
    with it here has the name that CLI would give it for the same folder."""
    labels = {"devcontainer.config_file": str(config_file),
              "devcontainer.local_folder": str(local_folder)}
    text = json.dumps(labels, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    number = int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")
    digits = "0123456789abcdefghijklmnopqrstuv"
    out = ""
    while number:
        number, rest = divmod(number, 32)
        out = digits[rest] + out
    return out.rjust(52, "0")


def variables(local_folder: Path, config_file: Path, container_folder: str,
              env: Mapping[str, str]) -> Variables:
    """The variables of the project at `local_folder`, whose workspace is at
    `container_folder` in the cell."""
    container = container_folder.rstrip("/") or "/"
    return Variables(dict(env), {
        "localWorkspaceFolder": str(local_folder),
        "localWorkspaceFolderBasename": local_folder.name,
        "containerWorkspaceFolder": container,
        "containerWorkspaceFolderBasename": container.rsplit("/", 1)[-1],
        "devcontainerId": devcontainer_id(local_folder, config_file),
    })


_CONTAINER_ENV = re.compile(r"\$\{containerEnv:([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


def as_shell(text: str) -> str:
    """`text`, a command for /bin/sh -c in the cell, with `${containerEnv:NAME}` written as
    the shell's `${NAME}` (and `${containerEnv:NAME:default}` as `${NAME:-default}`): the
    same value, read where it is known."""
    return _CONTAINER_ENV.sub(
        lambda m: "${" + m.group(1) + (f":-{m.group(2)}" if m.group(2) is not None else "")
        + "}", text)
