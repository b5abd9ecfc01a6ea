"""`devcell import devcontainer`: the fields about who runs what, when and with which
environment, and the editor's settings.

- remoteUser / containerUser -> spec.user (hooks, services, exec and ssh run as that user;
  remoteUser wins when both are given, as it is the one the commands run as).
- userEnvProbe -> spec.userEnvProbe (the user's shell environment for hooks and sessions).
- postAttachCommand -> spec.hooks.postAttach (run when a developer attaches: ssh, exec -t).
- initializeCommand -> spec.hooks.hostInitialize (run on the host before each start), only
  when DevCell's configuration allows host commands; refused otherwise, naming the allowance.
- customizations.vscode.extensions / settings (and the older top-level extensions /
  settings) -> metadata.annotations, as JSON, for `devcell code` to apply.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcell import names, security
from devcell.api.devcontainer_converter import Converter as _Converter
from devcell.api.devcontainer_rules import looks_secret

HANDLED = frozenset({"remoteUser", "containerUser", "userEnvProbe", "postAttachCommand",
                     "initializeCommand", "customizations", "extensions", "settings"})
"""The devcontainer.json fields this module converts (or refuses)."""
EXTENSIONS = "devcell.dev/vscode-extensions"
"""Annotation: the VS Code extensions to install in the cell's server, a JSON array of ids."""
SETTINGS = "devcell.dev/vscode-settings"
"""Annotation: VS Code's machine settings for the cell, a JSON object."""
MAX_ANNOTATION = 4096
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?")
_EXTENSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*\.[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9.+-]+)?")
_PROBES = ("none", "loginShell", "loginInteractiveShell", "interactiveShell")


Forms = Callable[[Any], "list[list[str]] | None"]
"""devcontainer.py's reader of a lifecycle command's three forms (string, array, object)."""


def convert(c: _Converter, forms: Forms) -> None:
    """Each field this module handles, into c.spec / c.annotations / c.notes / c.r.problems."""
    _user(c)
    _probe(c)
    _post_attach(c, forms)
    _host_initialize(c, forms)
    _customizations(c)


def _user(c: _Converter) -> None:
    remote, container = c.data.get("remoteUser"), c.data.get("containerUser")
    key = "remoteUser" if remote is not None else "containerUser"
    user = remote if remote is not None else container
    if user is None:
        return
    if not isinstance(user, str):
        c.r.refuse("expected a user name or uid (a string)", key)
        return
    expanded = c._filled(user, key)
    if expanded is None:
        return
    if not _USER.fullmatch(expanded):
        c.r.refuse("expected a user name or uid, optionally :GROUP (letters, digits, _ . -)",
                   key)
        return
    if remote is not None and isinstance(container, str) and container != remote:
        c.notes.append(f"containerUser: not converted (a cell runs as one user: remoteUser "
                       f"{expanded} runs its services, hooks and sessions)")
    c.spec["user"] = expanded
    c.origins["spec.user"] = (key,)


def _probe(c: _Converter) -> None:
    value = c.data.get("userEnvProbe")
    if value is None:
        return
    if value not in _PROBES:
        c.r.refuse("expected one of " + ", ".join(_PROBES), "userEnvProbe")
        return
    if value != "none":
        c.spec["userEnvProbe"] = value
        c.origins["spec.userEnvProbe"] = ("userEnvProbe",)


def _commands(c: _Converter, key: str, forms: Forms) -> list[list[str]] | None:
    """A lifecycle command in its three forms, its variables filled in as the converter
    fills those of postCreateCommand (None: refused)."""
    commands = forms(c.data[key])
    if commands is None:
        c.r.refuse("expected a string, an array of strings, or an object of either", key)
        return None
    filled = c._filled_command(commands, key)
    if filled is not None and isinstance(c.data[key], dict) and len(filled) > 1:
        c.notes.append(f"{key}: its {len(filled)} commands run one after another, not in "
                       "parallel")
    return filled


def _post_attach(c: _Converter, forms: Forms) -> None:
    if "postAttachCommand" not in c.data:
        return
    commands = _commands(c, "postAttachCommand", forms)
    if commands:
        c.spec.setdefault("hooks", {})["postAttach"] = commands
        c.origins["spec.hooks.postAttach"] = ("postAttachCommand",)


def _host_initialize(c: _Converter, forms: Forms) -> None:
    if "initializeCommand" not in c.data:
        return
    if not c.policy.allow_host_commands:
        c.r.refuse("initializeCommand runs on the host, as you, before each start; DevCell "
                   "runs nothing on the host unless its configuration allows host commands "
                   f"(security.allowHostCommands: true in {c.policy.source}); allow it only "
                   "for a project you trust, or remove the field", "initializeCommand")
        return
    if "${containerEnv:" in json.dumps(c.data["initializeCommand"]):
        c.r.refuse("${containerEnv:...} in initializeCommand: it runs on the host, before "
                   "any container exists", "initializeCommand")
        return
    raw = c.data["initializeCommand"]
    if isinstance(raw, str):  # run by /bin/sh -c on the host, where the variable is
        kept = _HOST_CREDENTIAL.sub(_shell_reference, raw)
        if kept != raw:
            c.data = {**c.data, "initializeCommand": kept}
            c.notes.append("initializeCommand: a credential it reads from this shell's "
                           "environment (${localEnv:NAME}) is left as the shell's ${NAME}, "
                           "read on the host when it runs, so its value is never written in "
                           "the manifest, shown or recorded; apply from a shell that has it")
    commands = _commands(c, "initializeCommand", forms)
    if not commands:
        return
    c.spec.setdefault("hooks", {})["hostInitialize"] = commands
    c.origins["spec.hooks.hostInitialize"] = ("initializeCommand",)
    if c.out_dir.resolve() != c.root:
        c.notes.append(f"initializeCommand: it runs in the folder of the manifest "
                       f"({c.out_dir.resolve()}), not in the project's ({c.root}); write the "
                       "manifest there to run it where devcontainer.json meant")


_HOST_CREDENTIAL = re.compile(r"\$\{(?:localEnv|env):([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


def _shell_reference(m: re.Match[str]) -> str:
    """`${localEnv:NAME[:default]}` of a credential-named NAME as the shell's own reference
    (unset: the default, as the specification's form gives it); anything else as written."""
    name, default = m.group(1), m.group(2)
    if not looks_secret(name) or default is not None and any(c in default for c in "'\"$`\\"):
        return m.group(0)
    return "${" + name + ("" if default is None else f"-{default}") + "}"


def _customizations(c: _Converter) -> None:
    extensions: list[str] = []
    settings: dict[str, Any] = {}
    custom = c.data.get("customizations")
    keys: dict[str, tuple[str | int, ...]] = {}
    if custom is not None and not isinstance(custom, dict):
        c.r.refuse("expected an object of tools' settings", "customizations")
        return
    for tool in sorted(custom or {}):
        if tool != "vscode":
            c.note(f"customizations.{tool}", "DevCell applies only VS Code's extensions and "
                   "settings (devcell code)")
    vscode = (custom or {}).get("vscode")
    sources: list[tuple[Any, tuple[str | int, ...]]] = [
        (c.data.get("extensions"), ("extensions",)), (c.data.get("settings"), ("settings",))]
    if isinstance(vscode, dict):
        sources += [(vscode.get("extensions"), ("customizations", "vscode", "extensions")),
                    (vscode.get("settings"), ("customizations", "vscode", "settings"))]
        for extra in sorted(set(vscode) - {"extensions", "settings"}):
            c.note(f"customizations.vscode.{extra}", "DevCell applies only extensions and "
                   "settings")
    elif vscode is not None:
        c.r.refuse("expected an object (extensions, settings)", "customizations", "vscode")
        return
    for value, key in sources:
        if value is None:
            continue
        if key[-1] == "extensions":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                c.r.refuse("expected an array of extension ids (publisher.name)", *key)
                continue
            for i, ext in enumerate(value):
                name = ext.lstrip("-")  # "-publisher.name": leave a default one out
                if ext.startswith("-"):
                    extensions = [e for e in extensions if e != name]
                elif not _EXTENSION.fullmatch(ext):
                    c.r.refuse("expected an extension id (publisher.name)", *key, i)
                elif ext not in extensions:
                    extensions.append(ext)
            keys[EXTENSIONS] = key
        else:
            if not isinstance(value, dict):
                c.r.refuse("expected an object of VS Code settings", *key)
                continue
            settings.update(value)
            keys[SETTINGS] = key
    for annotation, data in ((EXTENSIONS, extensions), (SETTINGS, settings)):
        if not data:
            continue
        text = json.dumps(data, separators=(",", ":"), sort_keys=annotation == SETTINGS)
        where = ".".join(str(k) for k in keys[annotation])
        if len(text) > MAX_ANNOTATION:
            c.note(where, f"{len(text)} characters of JSON, more than an annotation holds "
                   f"({MAX_ANNOTATION})")
            continue
        c.annotations[annotation] = text
        c.origins[f"metadata.annotations.{annotation}"] = keys[annotation]


def runs_on_host_in(c: _Converter, root: Path) -> bool:
    """Whether initializeCommand would read the project folder `root` were it bound live (it
    runs in the folder the manifest is written to, or names a file of the project): the
    folder must then be copied, not bound live (security.host_command_problem refuses a
    host command a cell could change)."""
    hooks = (c.spec.get("hooks") or {}).get("hostInitialize")
    if not hooks:
        return False
    live = {"workspace": {"source": {"hostPath": {"path": str(root.resolve())}}},
            "hooks": {"hostInitialize": hooks}}
    return security.host_command_problem(live, str(c.out_dir.resolve())) is not None


_NUMERIC = re.compile(r"(\d+)(?::(\d+))?")


def user_on_live_folder(c: _Converter, root: Path) -> None:
    """remoteUser/containerUser given by name (or as root) on a project folder bound live:
    a cell writing a host folder runs by number only, never as root (a name could map to
    root in the image; DevCell refuses to create it), so it runs as the folder's owner, as
    the devcontainer CLI's updateRemoteUserUID gives remoteUser the developer's uid."""
    user = c.spec.get("user")
    if not user:
        return
    numeric = _NUMERIC.fullmatch(str(user))
    if numeric and int(numeric.group(1)) != 0 and int(numeric.group(2) or 1) != 0:
        return
    try:
        st = os.stat(root)
    except OSError:
        return
    c.spec["user"] = f"{st.st_uid}:{st.st_gid}"
    key = c.origins.get("spec.user", ("remoteUser",))
    c.notes.append(f"{'.'.join(str(k) for k in key)}: {names.printable(str(user))} runs as "
                   f"uid {st.st_uid}:{st.st_gid}, the owner of the folder bound live (a cell "
                   "writing a host folder runs by number, never as root: a name could be "
                   "root in the image), as the devcontainer CLI gives remoteUser the "
                   "developer's uid; in most images that uid is remoteUser's")
