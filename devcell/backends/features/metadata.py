"""A feature's devcontainer-feature.json: what it installs, its options and what it asks of
the container (containerEnv, mounts, capAdd, privileged, securityOpt, init, entrypoint).

The file comes from the feature's author (a registry, a tarball, a teammate's folder): it is
read bounded, as a regular file, never through a link, and every field DevCell uses is
checked for its type here, so a malformed one is refused naming the feature and the field,
never a traceback later.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any

from devcell.errors import ImageBuildFailed

FILE = "devcontainer-feature.json"
INSTALL = "install.sh"
MAX_BYTES = 256 * 1024
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_OPTION = re.compile(r"^[A-Za-z0-9_.-]{1,128}\Z")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


@dataclass(frozen=True)
class Option:
    type: str
    """"boolean" or "string"."""
    default: str | bool | None = None
    enum: tuple[str, ...] = ()
    proposals: tuple[str, ...] = ()


@dataclass(frozen=True)
class Feature:
    """One feature's metadata, checked."""

    id: str
    version: str = ""
    options: dict[str, Option] = field(default_factory=dict)
    installs_after: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    container_env: dict[str, str] = field(default_factory=dict)
    mounts: tuple[Any, ...] = ()
    cap_add: tuple[str, ...] = ()
    privileged: bool = False
    security_opt: tuple[str, ...] = ()
    init: bool = False
    entrypoint: str = ""


def env_name(option: str) -> str:
    """The variable install.sh reads an option from, as the specification makes it: every
    character but letters, digits and _ replaced by _, leading digits and _ by one _, upper
    case."""
    name = re.sub(r"[^\w]", "_", option, flags=re.ASCII)
    return re.sub(r"^[\d_]+", "_", name).upper()


def read(folder: str, shown: str) -> Feature:
    """The metadata of the feature in `folder` (`shown` names it in messages); ImageBuildFailed
    when it is missing, unreadable or malformed, or install.sh is not a regular file."""
    data = _read_json(os.path.join(folder, FILE), shown)
    try:
        st = os.lstat(os.path.join(folder, INSTALL))
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        raise ImageBuildFailed(f"feature {shown}: {INSTALL} is missing or not a regular file")
    return parse(data, shown)


def _read_json(path: str, shown: str) -> dict[str, Any]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise ImageBuildFailed(f"feature {shown}: cannot read {FILE} "
                               f"({exc.strerror or exc}); a feature is a folder holding "
                               f"{FILE} and {INSTALL}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ImageBuildFailed(f"feature {shown}: {FILE} is not a regular file")
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise ImageBuildFailed(f"feature {shown}: {FILE} is larger than "
                               f"{MAX_BYTES // 1024} KiB")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ImageBuildFailed(f"feature {shown}: {FILE} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ImageBuildFailed(f"feature {shown}: {FILE} must hold an object")
    return data


def parse(data: dict[str, Any], shown: str) -> Feature:
    def bad(key: str, expected: str) -> ImageBuildFailed:
        return ImageBuildFailed(f"feature {shown}: {FILE} field {key}: expected {expected}")

    def strings(key: str) -> tuple[str, ...]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad(key, "a list of strings")
        return tuple(value)

    fid = data.get("id")
    if not isinstance(fid, str) or not _ID.match(fid):
        raise bad("id", "a feature id (letters, digits, . _ -)")
    version = data.get("version", "")
    if not isinstance(version, str):
        raise bad("version", "a string")
    depends = data.get("dependsOn", {})
    if not isinstance(depends, dict):
        raise bad("dependsOn", "an object of feature references")
    env = data.get("containerEnv", {})
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and _ENV_NAME.match(k) and isinstance(v, str)
            and not any(ord(c) < 32 or ord(c) == 127 for c in v) for k, v in env.items()):
        raise bad("containerEnv", "an object of variable names to one-line strings")
    mounts = data.get("mounts", [])
    if not isinstance(mounts, list):
        raise bad("mounts", "a list")
    for key in ("privileged", "init"):
        if not isinstance(data.get(key, False), bool):
            raise bad(key, "true or false")
    entrypoint = data.get("entrypoint", "")
    if not isinstance(entrypoint, str) or any(ord(c) < 32 or ord(c) == 127 for c in entrypoint):
        raise bad("entrypoint", "a one-line command")
    return Feature(
        id=fid, version=version, options=_options(data.get("options", {}), shown),
        installs_after=strings("installsAfter"), depends_on=tuple(str(k) for k in depends),
        container_env=dict(env), mounts=tuple(mounts), cap_add=strings("capAdd"),
        privileged=bool(data.get("privileged", False)), security_opt=strings("securityOpt"),
        init=bool(data.get("init", False)), entrypoint=entrypoint)


def _options(value: Any, shown: str) -> dict[str, Option]:
    if not isinstance(value, dict):
        raise ImageBuildFailed(f"feature {shown}: {FILE} field options: expected an object")
    found = {}
    for name, option in value.items():
        if not _OPTION.match(str(name)):
            raise ImageBuildFailed(f"feature {shown}: {FILE} field options: {name!r} is not an "
                                   "option id (letters, digits, _ . -)")
        where = f"feature {shown}: {FILE} field options.{name}"
        if not isinstance(option, dict) or option.get("type") not in ("boolean", "string"):
            raise ImageBuildFailed(f"{where}: expected an object with type boolean or string")
        enum = option.get("enum", [])
        proposals = option.get("proposals", [])
        if not isinstance(enum, list) or not isinstance(proposals, list):
            raise ImageBuildFailed(f"{where}: enum and proposals must be lists")
        default = option.get("default")
        if default is not None and not isinstance(default, (str, bool)):
            raise ImageBuildFailed(f"{where}.default: expected a string or true/false")
        found[str(name)] = Option(option["type"], default, tuple(str(v) for v in enum),
                                  tuple(str(v) for v in proposals))
    return found


def resolve_options(feature: Feature, given: dict[str, Any], shown: str) -> dict[str, str]:
    """The environment install.sh runs with: every option of the feature, the value given
    (checked against its type and enum) or its default, by the specification's variable
    name. ImageBuildFailed names an unknown option or a value the feature does not accept."""
    unknown = sorted(set(given) - set(feature.options))
    if unknown:
        known = ", ".join(sorted(feature.options)) or "none"
        raise ImageBuildFailed(f"feature {shown}: no option {unknown[0]} (its options: "
                               f"{known})")
    env: dict[str, str] = {}
    for name, option in sorted(feature.options.items()):
        value = given.get(name, option.default)
        if value is None:
            continue
        if option.type == "boolean":
            if isinstance(value, str) and value in ("true", "false"):
                value = value == "true"
            if not isinstance(value, bool):
                raise ImageBuildFailed(f"feature {shown}: option {name} is a boolean; "
                                       f"{value!r} is not true or false")
            text = "true" if value else "false"
        else:
            if isinstance(value, bool):
                value = "true" if value else "false"
            text = str(value)
            if option.enum and text not in option.enum:
                raise ImageBuildFailed(f"feature {shown}: option {name} must be one of "
                                       f"{', '.join(option.enum)}; {text!r} is not")
        if any(ord(c) < 32 and c not in "\t" or ord(c) == 127 for c in text):
            raise ImageBuildFailed(f"feature {shown}: option {name} holds a control character")
        env[env_name(name)] = text
    return env
