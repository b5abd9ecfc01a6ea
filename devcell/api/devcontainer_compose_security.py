"""A compose service's privileges (`privileged`, `cap_add`, `security_opt`, `devices`, `init`)
as the cell's spec.security, in the form `docker run` flags take there: admission then allows
each only where DevCell's configuration does (security.allowedCapabilities and its kin), the
refusal naming the allowance and, through the import's blame, the compose file's line.

Compose writes them a little differently from the engine's flags: `CAP_SYS_PTRACE` or
`SYS_PTRACE`, `seccomp:unconfined` (the old colon form) or `seccomp=unconfined`, a device as
`/dev/fuse:/dev/fuse:rwm` or in the long form; they are written as spec.security takes them.
"""

from __future__ import annotations

from typing import Any

from devcell import names
from devcell.api.devcontainer_compose_fields import Fields
from devcell.api.devcontainer_compose_yaml import Node, Where

KEYS = ("privileged", "cap_add", "security_opt", "devices", "init")
_OPTS = ("seccomp", "apparmor", "label", "systempaths", "no-new-privileges")


def read(fields: dict[str, Node], f: Fields) -> tuple[dict[str, Any], dict[str, Where]]:
    """(spec.security's fields, where each came from: `privileged`, `capabilities[0]`)."""
    out: dict[str, Any] = {}
    where: dict[str, Where] = {}
    node = fields.get("privileged")
    if node is not None:
        if node.value is True:
            out["privileged"], where["privileged"] = True, node.where
        elif node.value not in (False, None):
            f.refuse(node.where, "expected true or false")
    node = fields.get("init")
    if node is not None and node.value not in (True, None):
        f.note(node.where, "every container cell runs under an init")  # false, or not bool
    for key, spec_key, one in (("cap_add", "capabilities", _capability),
                               ("security_opt", "securityOpt", _option),
                               ("devices", "devices", _device)):
        node = fields.get(key)
        if node is None:
            continue
        if not isinstance(node.value, list):
            f.refuse(node.where, "expected a list")
            continue
        made: list[str] = []
        for item in node.value:
            value = one(item, f)
            if value is not None and value not in made:
                where[f"{spec_key}[{len(made)}]"] = item.where
                made.append(value)
        if made:
            out[spec_key] = made
    return out, where


def _capability(item: Node, f: Fields) -> str | None:
    text = f.text(item)
    if text is None:
        return None
    name = text.strip().upper().removeprefix("CAP_")
    if name == "ALL":
        f.refuse(item.where, "cap_add: ALL is refused: name the capabilities the tool needs "
                 "(each allowed by security.allowedCapabilities of DevCell's configuration)")
        return None
    return name


def _option(item: Node, f: Fields) -> str | None:
    text = f.text(item)
    if text is None:
        return None
    key, sep, value = text.partition("=")
    if not sep:
        key, sep, value = text.partition(":")  # compose's older seccomp:unconfined
    if key == "no-new-privileges" and value in ("", "true"):
        return None  # what every cell has already
    if key not in _OPTS or not value:
        f.refuse(item.where, f"security_opt {names.printable(text)} has no equivalent: "
                 "DevCell takes seccomp=, apparmor=, label=, systempaths= and "
                 "no-new-privileges=false")
        return None
    return f"{key}={value}"


def _device(item: Node, f: Fields) -> str | None:
    if isinstance(item.value, dict):
        source = f.text(item.value.get("source"))
        target = f.text(item.value.get("target"), "")
        permissions = f.text(item.value.get("permissions"), "")
        if source is None or target is None or permissions is None:
            if item.value.get("source") is None:
                f.refuse(item.where, "expected source: the host's device")
            return None
        target = target or (source if permissions else "")
        text = ":".join(p for p in (source, target, permissions) if p)
    else:
        found = f.text(item)
        if found is None:
            return None
        text = found
    return text
