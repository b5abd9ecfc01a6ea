"""What an imported devcontainer.json's cell needs at run time that the file only implies.

- A network for its lifecycle commands. A dev container always has one, and its commands
  are written for one (`pip install -r requirements.txt`, `npm install`, `apt-get`, a git
  clone): whether a given script needs it cannot be told from its text, so the rule is plain
  and said on stderr: a cell with any lifecycle command (onCreate, updateContent,
  postCreate, postStart, postAttach) gets DevCell's bridge network; one without keeps DevCell's default,
  no network, and the import says how to give it one. `runArgs --network none` keeps none.
- `hostRequirements` (the smallest machine the project needs) as `spec.resources`: DevCell
  has only limits, so the cpus and memory asked become the cell's limits, lowered to what
  this machine has for cpus (a limit above it is refused at apply) and warned about.
- `sudo` in a hook: a cell runs with no-new-privileges and most capabilities dropped, so a
  setuid sudo gains nothing: run as another user it fails, and the import says so, naming
  the hook. Run as root it is not needed (root to root), but a sudo built with audit
  support may still refuse without AUDIT_WRITE, so that is said too.
"""

from __future__ import annotations

import os
import re
from typing import Any

NETWORK_HOOKS = ("onCreateCommand", "updateContentCommand", "postCreateCommand",
                 "postStartCommand", "postAttachCommand")
_SUDO = re.compile(r"(^|[;&|(`\n])\s*sudo(\s|$)")
"""sudo where a command starts (not `echo sudo`)."""
_MEMORY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(tb|gb|mb|kb|b)?\s*", re.IGNORECASE)
_UNITS = {"tb": 1 << 40, "gb": 1 << 30, "mb": 1 << 20, "kb": 1 << 10, "b": 1, None: 1}


def network(data: dict[str, Any], spec: dict[str, Any]) -> str:
    """Give the cell a bridge network when it has a lifecycle command (see the module's
    text); the sentence saying what was chosen."""
    hooks = [key for key in NETWORK_HOOKS if data.get(key)]
    current = (spec.get("network") or {}).get("mode")
    if _asks_no_network(data.get("runArgs")):
        return "network: none (runArgs --network none)"
    if current is not None:
        return f"network: {current}"
    if hooks:
        spec["network"] = {"mode": "bridge"}
        return (f"network: bridge, for the lifecycle commands ({', '.join(hooks)}): a dev "
                "container always has a network and they are written for one; write "
                "spec.network.mode: none to cut the cell off")
    return ("network: none (DevCell's default; a dev container has a network: write "
            "spec.network.mode: bridge to give the cell one)")


def _asks_no_network(run_args: Any) -> bool:
    if not isinstance(run_args, list):
        return False
    for i, arg in enumerate(run_args):
        if arg in ("--network=none", "--net=none"):
            return True
        if arg in ("--network", "--net") and i + 1 < len(run_args) \
                and run_args[i + 1] == "none":
            return True
    return False


def host_requirements(data: dict[str, Any], spec: dict[str, Any],
                      origins: dict[str, tuple[str | int, ...]]) -> list[str]:
    """`hostRequirements` cpus and memory as spec.resources (runArgs' --cpus and --memory,
    which are limits already, win); the warnings it makes."""
    asked = data.get("hostRequirements")
    if not isinstance(asked, dict):
        return [] if asked is None else ["hostRequirements: not converted (expected an object)"]
    notes: list[str] = []
    resources = spec.setdefault("resources", {})
    cpus = asked.get("cpus")
    if isinstance(cpus, int | float) and not isinstance(cpus, bool) and cpus > 0 \
            and "cpus" not in resources:
        have = os.cpu_count() or 1
        resources["cpus"] = float(min(cpus, have))
        origins["spec.resources.cpus"] = ("hostRequirements", "cpus")
        if cpus > have:
            notes.append(f"hostRequirements.cpus: {cpus} asked, this machine has {have}: the "
                         f"cell's limit is {have}")
    elif cpus is not None and "cpus" not in resources:
        notes.append("hostRequirements.cpus: not converted (expected a number of CPUs)")
    memory = asked.get("memory")
    if memory is not None and "memory" not in resources:
        size = _bytes(memory)
        if size is None:
            notes.append("hostRequirements.memory: not converted (expected a size such as "
                         "\"8gb\")")
        else:
            resources["memory"] = _quantity(size)
            origins["spec.resources.memory"] = ("hostRequirements", "memory")
            machine = _machine_memory()
            if machine is not None and size > machine:
                notes.append(f"hostRequirements.memory: {memory} asked, this machine has "
                             f"{_quantity(machine)}: the cell will not get it all")
    for key in sorted(set(asked) - {"cpus", "memory"}):
        notes.append(f"hostRequirements.{key}: not converted (DevCell limits only cpus and "
                     "memory)")
    if not resources:
        del spec["resources"]
    return notes


def _bytes(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    found = _MEMORY.fullmatch(value) if isinstance(value, str) else None
    if not found:
        return None
    size = int(float(found.group(1)) * _UNITS[(found.group(2) or "b").lower()])
    return size if size > 0 else None


def _quantity(size: int) -> str:
    """A byte count as a manifest's memory quantity (the largest exact binary unit)."""
    for unit, factor in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def _machine_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def sudo(data: dict[str, Any], runs_as: str | None, *, lifted: bool = False) -> list[str]:
    """A warning for each lifecycle command using sudo (`runs_as` names who the hooks run
    as; None: root). Not root: it cannot work, unless the cell lifts no-new-privileges
    (`lifted`: spec.security.securityOpt no-new-privileges=false, which admission allows only
    where the configuration does). Root: it is not needed, and may still fail."""
    notes = []
    for key in NETWORK_HOOKS:
        if not _SUDO.search(_text(data.get(key))):
            continue
        if runs_as is not None and lifted:
            notes.append(f"{key}: uses sudo: the hooks run as {runs_as}, and the cell lifts "
                         "no-new-privileges (securityOpt no-new-privileges=false), so it works "
                         "if the image gives that user sudo rights; a sudo built with audit "
                         "support may also need the capability AUDIT_WRITE")
        elif runs_as is not None:
            notes.append(f"{key}: uses sudo, which cannot work here: the hooks run as "
                         f"{runs_as}, and a cell runs with no-new-privileges (a setuid sudo "
                         "gains nothing) and most capabilities dropped; do the privileged "
                         "part in a Dockerfile RUN step (build), or ask for runArgs "
                         "--security-opt no-new-privileges=false where DevCell's "
                         "configuration allows it (security.allowedSecurityOpts)")
        else:
            notes.append(f"{key}: uses sudo; the hooks run as root, so it is not needed, and "
                         "a cell lacks the audit capability (AUDIT_WRITE) a sudo built with "
                         "audit support logs through: if it fails there, take sudo out")
    return notes


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    if isinstance(value, dict):
        return " ; ".join(_text(v) for v in value.values())
    return ""
