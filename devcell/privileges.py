"""The rules for `spec.security`: privileges a container cell asks for beyond DevCell's defaults.

A cell starts with every capability dropped but DEFAULT_CAPABILITIES, no-new-privileges, the
engine's seccomp and AppArmor profiles and no host device. Debuggers (SYS_PTRACE,
seccomp=unconfined), FUSE (/dev/fuse), docker-in-docker (privileged) need more; a manifest
may ask for it, and DevCell's configuration (`devcell.config`), which whoever writes manifests
cannot edit, decides: each privilege is refused unless an allowance of the configuration
names it, and the refusal names that allowance.

Checked twice, as the other security rules (devcell.security calls `cell_problems`): at
admission, naming the manifest's field, and by the container backend on the engine's create
arguments just before the call (`engine_problems`), so a configuration tightened since the
cell was applied is honoured at its next create.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from devcell.records import Record

if TYPE_CHECKING:
    from devcell.config import SecurityPolicy  # annotations only

FieldPath = tuple[str | int, ...]
DEFAULT_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
                        "NET_BIND_SERVICE")
"""Given back after dropping ALL: a subset of Docker's defaults (root can own and chmod its
files, switch users, signal its processes, bind low ports). No NET_RAW, MKNOD, SYS_CHROOT,
SETFCAP, AUDIT_WRITE unless the configuration allows them."""
NO_NEW_PRIVILEGES = "no-new-privileges"
LIFT_NO_NEW_PRIVILEGES = "no-new-privileges=false"
"""A securityOpt that drops DevCell's no-new-privileges instead of being passed on: the
engine's option of that name is only ever set, so the lift is DevCell's to make."""
_WHERE = ("security",)
_DEFAULTS = ", ".join(DEFAULT_CAPABILITIES)


class Device(Record):
    """One entry of spec.security.devices, as docker run --device writes it."""

    host: str
    inside: str
    permissions: str

    @classmethod
    def parse(cls, text: str) -> Device:
        host, _, rest = text.partition(":")
        inside, _, permissions = rest.partition(":")
        if inside and not inside.startswith("/"):  # /dev/x:rw: the second part is permissions
            inside, permissions = "", inside
        return cls(host, inside or host, permissions or "rwm")

    def engine(self) -> str:
        """The engine's `devices` entry, its host path resolved now (a later swap of a link
        changes nothing)."""
        return f"{os.path.realpath(self.host)}:{self.inside}:{self.permissions}"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _source(policy: SecurityPolicy) -> str:
    return f"DevCell's configuration ({policy.source})"


def device_problem(host: str, policy: SecurityPolicy) -> str | None:
    """Why host device `host` may not be given to a cell (None: it may). Symbolic links are
    resolved (/dev/serial/by-id/... names a tty), so a link cannot lead past the allowance."""
    resolved = os.path.realpath(host)
    shown = f" (resolves to {resolved})" if resolved != host else ""
    allowed = [os.path.realpath(p) for p in policy.allowed_devices]
    if not any(_inside(resolved, root) for root in allowed):
        return (f"host device {host}{shown} is not allowed: host devices are off by default; "
                f"an administrator can allow it by listing it in security.allowedDevices of "
                f"{_source(policy)}")
    try:
        mode = os.stat(resolved).st_mode
    except OSError:
        return f"host device {host}{shown} does not exist on this host"
    if not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISDIR(mode)):
        return f"{host}{shown} is not a device (nor a directory of devices)"
    return None


def cell_problems(spec: dict[str, Any], policy: SecurityPolicy
                  ) -> Iterator[tuple[FieldPath, str]]:
    """Every privilege of spec.security the configuration does not allow, as (field path under
    spec, message naming the allowance that would permit it)."""
    asked = spec.get("security") or {}
    for i, name in enumerate(asked.get("capabilities") or []):
        if name not in DEFAULT_CAPABILITIES and name not in policy.allowed_capabilities:
            yield ((*_WHERE, "capabilities", i),
                   f"capability {name} is not allowed: a cell has only {_DEFAULTS} by default; "
                   f"an administrator can allow it by "
                   f"listing {name} in security.allowedCapabilities of {_source(policy)}")
    for i, option in enumerate(asked.get("securityOpt") or []):
        if option not in policy.allowed_security_opts:
            yield ((*_WHERE, "securityOpt", i),
                   f"security option {option} loosens the cell's confinement and is not "
                   f"allowed; an administrator can allow it by listing {option} in "
                   f"security.allowedSecurityOpts of {_source(policy)}")
    if asked.get("privileged") and not policy.allow_privileged:
        yield ((*_WHERE, "privileged"),
               "a privileged container has every capability and every host device (its root "
               "is close to the host's) and is off by default; an administrator can allow it "
               f"with security.allowPrivileged: true in {_source(policy)}")
    for i, text in enumerate(asked.get("devices") or []):
        device = Device.parse(str(text))
        problem = device_problem(device.host, policy)
        if problem:
            yield (*_WHERE, "devices", i), problem
    if asked.get("init") is False:
        yield ((*_WHERE, "init"),
               "every container cell runs under the engine's init (PID 1, reaping orphaned "
               "processes), with DevCell's supervisor beneath it; it cannot be turned off: "
               "leave init out")


def engine_arguments(spec: dict[str, Any]) -> dict[str, Any]:
    """The engine's create arguments for spec.security (cap_add, security_opt, privileged,
    devices), DevCell's defaults included."""
    asked = spec.get("security") or {}
    options = list(asked.get("securityOpt") or [])
    lifted = LIFT_NO_NEW_PRIVILEGES in options
    added = [c for c in asked.get("capabilities") or [] if c not in DEFAULT_CAPABILITIES]
    out: dict[str, Any] = {
        "privileged": bool(asked.get("privileged", False)),
        "cap_drop": ["ALL"],
        "cap_add": [*DEFAULT_CAPABILITIES, *added],
        "security_opt": ([] if lifted else [NO_NEW_PRIVILEGES])
        + [o for o in options if o != LIFT_NO_NEW_PRIVILEGES],
    }
    devices = [Device.parse(str(d)).engine() for d in asked.get("devices") or []]
    if devices:
        out["devices"] = devices
    return out


def engine_problems(kwargs: dict[str, Any], policy: SecurityPolicy) -> Iterator[str]:
    """What the engine's create arguments grant beyond DevCell's defaults and `policy`: the
    last check before the engine, whatever built the arguments."""
    if kwargs.get("privileged") and not policy.allow_privileged:
        yield "privileged containers are not allowed (security.allowPrivileged)"
    if kwargs.get("cap_drop") != ["ALL"]:
        yield "every capability must be dropped first (cap_drop ALL)"
    extra = set(kwargs.get("cap_add") or []) - {*DEFAULT_CAPABILITIES,
                                                 *policy.allowed_capabilities}
    if extra:
        yield (f"capabilities {sorted(extra)} may not be added (security.allowedCapabilities)")
    options = list(kwargs.get("security_opt") or [])
    if NO_NEW_PRIVILEGES not in options and \
            LIFT_NO_NEW_PRIVILEGES not in policy.allowed_security_opts:
        yield ("no-new-privileges must be set (security.allowedSecurityOpts does not list "
               f"{LIFT_NO_NEW_PRIVILEGES})")
    for option in options:
        if option != NO_NEW_PRIVILEGES and option not in policy.allowed_security_opts:
            yield f"security option {option} is not allowed (security.allowedSecurityOpts)"
    for entry in kwargs.get("devices") or []:
        problem = device_problem(str(entry).partition(":")[0], policy) \
            if isinstance(entry, str) else "devices must be HOST:CELL:PERMISSIONS strings"
        if problem:
            yield f"devices: {problem}"
