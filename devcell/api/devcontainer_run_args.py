"""`devcell import devcontainer`: the privileges a devcontainer.json asks for, as spec.security.

- runArgs `--cap-add`, `--security-opt`, `--privileged`, `--device`, `--init` and the
  top-level `capAdd`, `securityOpt`, `privileged`, `init` -> spec.security (capabilities,
  securityOpt, privileged, devices, init);
- `--network=host` -> spec.network.mode host; `--user` -> spec.user when no remoteUser or
  containerUser said it;
- what has no field (`--shm-size`, `--ulimit`, `--hostname`, `--cap-drop`, ...) named with
  why, never dropped silently.

Each privilege is judged here, as it is read, by the rules admission runs
(devcell.privileges) against DevCell's configuration: a refusal names the devcontainer.json
line and entry it came from and the allowance that would permit it, in the same round as
every other problem of the file. A form DevCell cannot pass on (a seccomp profile file,
`--cap-add=ALL`, a device that is not a path) is refused with why.
"""

from __future__ import annotations

import re
from typing import Any

from devcell import privileges
from devcell.api.devcontainer_converter import Converter as _Converter

CAPABILITIES = frozenset("""
    AUDIT_CONTROL AUDIT_READ AUDIT_WRITE BLOCK_SUSPEND BPF CHECKPOINT_RESTORE CHOWN DAC_OVERRIDE
    DAC_READ_SEARCH FOWNER FSETID IPC_LOCK IPC_OWNER KILL LEASE LINUX_IMMUTABLE MAC_ADMIN
    MAC_OVERRIDE MKNOD NET_ADMIN NET_BIND_SERVICE NET_BROADCAST NET_RAW PERFMON SETFCAP SETGID
    SETPCAP SETUID SYS_ADMIN SYS_BOOT SYS_CHROOT SYS_MODULE SYS_NICE SYS_PACCT SYS_PTRACE
    SYS_RAWIO SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG SYSLOG WAKE_ALARM""".split())
"""Linux's capabilities (as the Cell schema's spec.security.capabilities lists them)."""
HANDLED = frozenset({"capAdd", "securityOpt", "privileged", "init"})
"""The top-level devcontainer.json fields this module converts (or refuses)."""
FLAGS = frozenset({"--cap-add", "--cap-drop", "--security-opt", "--privileged", "--device",
                   "--init", "--network", "--net", "--shm-size", "--ulimit", "-h",
                   "--hostname", "-u", "--user"})
"""The runArgs flags this module converts (or refuses, or names as not converted)."""
_OPTION = re.compile(r"(seccomp=unconfined|apparmor=[A-Za-z0-9_.-]{1,128}|label=(disable|"
                     r"(user|role|type|level):[A-Za-z0-9_.:,-]{1,128})|systempaths=unconfined|"
                     r"no-new-privileges=false)")
"""The security options a Cell may ask for (the schema's spec.security.securityOpt)."""
_DEVICE = re.compile(r"/dev/[^\x00-\x1f\x7f:]{1,4000}(:/[^\x00-\x1f\x7f:]{1,4000})?(:[rwm]{1,3})?")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?")
_TRUE = ("", "true", "1", "t")  # Go's ParseBool, as docker reads flags (lower-cased)
_NO_FIELD = {
    "--shm-size": "no equivalent in DevCell: /dev/shm is the engine's default (64 MiB); a "
                  "program that needs more can use a directory of the workspace",
    "--ulimit": "no equivalent in DevCell: a cell has the engine's default limits (open "
                "files, processes: spec.resources and DevCell's pids limit)",
    "--hostname": "the cell's host name is its name (metadata.name)",
    "-h": "the cell's host name is its name (metadata.name)",
}


def _refuse(c: _Converter, origin: tuple[str | int, ...], shown: str, message: str) -> None:
    """Refused at the line `origin` names; a runArgs entry is shown as devcontainer.py shows
    them (field runArgs, the message naming the flag: `shown`)."""
    if origin[0] == "runArgs":
        c.r.refuse(f"{shown} is refused: {message}", *origin, shown="runArgs")
    else:
        c.r.refuse(message, *origin)


def _allowed(c: _Converter, key: str, value: Any, origin: tuple[str | int, ...],
             shown: str) -> bool:
    """Whether the configuration allows spec.security[key] to hold `value`; refused at
    `origin`, naming the allowance, when it does not."""
    one = {key: [value] if isinstance(value, str) else value}
    for _, message in privileges.cell_problems({"security": one}, c.policy):
        _refuse(c, origin, shown, message)
        return False
    return True


def _add(c: _Converter, key: str, value: Any, origin: tuple[str | int, ...],
         shown: str) -> None:
    """Append `value` to spec.security[key] once (the schema wants each once), remembering
    where it came from (a problem apply finds later names that line)."""
    if not _allowed(c, key, value, origin, shown):
        return
    values = c.spec.setdefault("security", {}).setdefault(key, [])
    if value not in values:
        c.origins[f"spec.security.{key}[{len(values)}]"] = origin
        values.append(value)


def _set(c: _Converter, key: str, value: Any, origin: tuple[str | int, ...],
         shown: str) -> None:
    if not _allowed(c, key, value, origin, shown):
        return
    c.spec.setdefault("security", {})[key] = value
    c.origins[f"spec.security.{key}"] = origin


def capability(c: _Converter, name: str, origin: tuple[str | int, ...], shown: str) -> None:
    """A capability as docker reads it (any case, CAP_ or not) into spec.security."""
    canonical = name.strip().upper().removeprefix("CAP_")
    if canonical == "ALL":
        _refuse(c, origin, shown, "every capability at once is not passed on; list the ones "
                                  "needed (each allowed by security.allowedCapabilities of "
                                  "DevCell's configuration), or ask for privileged "
                                  "(security.allowPrivileged)")
    elif canonical not in CAPABILITIES:
        _refuse(c, origin, shown, f"{name!r} is not a Linux capability")
    else:
        _add(c, "capabilities", canonical, origin, shown)


def security_opt(c: _Converter, option: str, origin: tuple[str | int, ...], shown: str) -> None:
    """A security option, docker's `key:value` spelling read as `key=value`; DevCell's own
    no-new-privileges is already set, so asking for it adds nothing."""
    key, sep, value = option.strip().partition("=")
    if not sep:
        key, sep, value = option.strip().partition(":")
    normal = f"{key}={value}" if sep else key
    if normal in ("no-new-privileges", "no-new-privileges=true"):
        return
    if key == "seccomp" and value != "unconfined":
        _refuse(c, origin, shown, "a seccomp profile file is not read from the host; the "
                                  "engine's default profile applies, or seccomp=unconfined "
                                  "where DevCell's configuration allows it "
                                  "(security.allowedSecurityOpts)")
    elif not _OPTION.fullmatch(normal):
        _refuse(c, origin, shown, "not a security option a cell may ask for "
                                  "(seccomp=unconfined, apparmor=..., label=..., "
                                  "systempaths=unconfined, no-new-privileges=false)")
    else:
        _add(c, "securityOpt", normal, origin, shown)


def privileged(c: _Converter, origin: tuple[str | int, ...], shown: str) -> None:
    _set(c, "privileged", True, origin, shown)


def device(c: _Converter, text: str, origin: tuple[str | int, ...], shown: str) -> None:
    if not _DEVICE.fullmatch(text.strip()):
        _refuse(c, origin, shown, "expected a host device path under /dev, optionally "
                                  ":CELLPATH[:PERMISSIONS] (of r, w, m)")
    else:
        _add(c, "devices", text.strip(), origin, shown)


def top_level(c: _Converter) -> None:
    """capAdd, securityOpt, privileged, init."""
    for key, each in (("capAdd", capability), ("securityOpt", security_opt)):
        values = c.data.get(key)
        if values is None:
            continue
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            c.r.refuse("expected an array of strings", key)
            continue
        for i, value in enumerate(values):
            each(c, value, (key, i), f"{key}[{i}]")
    for key in ("privileged", "init"):
        value = c.data.get(key)
        if value is not None and not isinstance(value, bool):
            c.r.refuse("expected true or false", key)
        elif value and key == "privileged":
            privileged(c, (key,), key)
        elif value:
            _set(c, "init", True, (key,), key)
        elif value is False and key == "init":
            c.note("init", "every cell runs under the engine's init anyway, with DevCell's "
                           "supervisor beneath it")


def run_arg(c: _Converter, flag: str, value: str, index: int, shown: str) -> bool:
    """One runArgs flag (`value` its argument, '' when none) into the spec; False when the
    flag is not this module's."""
    origin: tuple[str | int, ...] = ("runArgs", index)
    where = f"runArgs {shown}"
    if flag == "--cap-add":
        for name in value.split(","):  # docker takes a list in one argument too
            capability(c, name, origin, shown)
    elif flag == "--security-opt":
        security_opt(c, value, origin, shown)
    elif flag == "--device":
        device(c, value, origin, shown)
    elif flag == "--privileged":
        if value.lower() in _TRUE:
            privileged(c, origin, shown)
    elif flag == "--init":
        if value.lower() in _TRUE:
            _set(c, "init", True, origin, shown)
    elif flag in ("--network", "--net"):
        _network(c, value, origin, shown)
    elif flag in ("-u", "--user"):
        _user(c, value, origin, shown)
    elif flag == "--cap-drop":
        c.note(where, "a cell has every capability dropped already but CHOWN, DAC_OVERRIDE, "
                      "FOWNER, FSETID, KILL, SETGID, SETUID and NET_BIND_SERVICE")
    elif flag in _NO_FIELD:
        c.note(where, _NO_FIELD[flag])
    else:
        return False
    return True


def _network(c: _Converter, value: str, origin: tuple[str | int, ...], shown: str) -> None:
    if value == "none":
        return
    if value == "host":
        if not c.policy.allow_host_network:
            _refuse(c, origin, shown, "the host's network is not shared unless an "
                                      "administrator allows it with security.allowHostNetwork: "
                                      f"true in DevCell's configuration ({c.policy.source})")
            return
        c.spec["network"] = {"mode": "host"}
        c.origins["spec.network.mode"] = origin
        return
    c.note(f"runArgs {shown}", "cells use no network, or their own bridge when ports are "
                               "forwarded or lifecycle commands need one")


def _user(c: _Converter, value: str, origin: tuple[str | int, ...], shown: str) -> None:
    if c.spec.get("user"):
        c.note(f"runArgs {shown}", f"the cell runs as {c.spec['user']} (remoteUser/containerUser)")
    elif not _USER.fullmatch(value):
        _refuse(c, origin, shown, "expected a user name or uid, optionally :GROUP")
    else:
        c.spec["user"] = value
        c.origins["spec.user"] = origin


def lifts_no_new_privileges(spec: dict[str, Any]) -> bool:
    """Whether the cell asks for setuid programs (sudo) to work."""
    return "no-new-privileges=false" in ((spec.get("security") or {}).get("securityOpt") or [])
