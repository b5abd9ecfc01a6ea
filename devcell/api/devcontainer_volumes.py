"""devcontainer.json `mounts` that are not binds: named volumes as the cell's own volumes
(`spec.volumes`), tmpfs mounts named as not converted.

A named volume in a dev container is the engine's, shared by every container naming it;
`source=cache-${devcontainerId}` makes it one project's. A cell's volume is its own (kept
across recreate, sleep and start, removed with the cell), which is that per-project meaning;
a name without `${devcontainerId}` (shared between projects there) is said to become the
cell's own. The volume's name in the cell is the source with `${devcontainerId}` taken out
and made a DNS-1123 label (an anonymous volume is named after its target), unique in the cell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Volume:
    """A spec.volumes entry, and what to say of it."""

    entry: dict[str, str]
    note: str | None = None


def volume(source: str, target: str, devcontainer_id: str, taken: set[str]) -> Volume:
    """The cell volume for a `type=volume` mount of `source` (variables filled in) at
    `target`; `taken` holds the names already used (the new one is added)."""
    shared = bool(source) and devcontainer_id not in source
    base = source.replace(devcontainer_id, "") if source else target
    name = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")[:55].strip("-") or "volume"
    unique, n = name, 2
    while unique in taken:
        unique, n = f"{name}-{n}", n + 1
    taken.add(unique)
    note = (f"the engine's volume {source} is shared by every container naming it; the cell "
            f"gets its own, {unique} (kept until the cell is deleted)") if shared else None
    return Volume({"name": unique, "mountPath": target}, note)


def tmpfs_note(target: str) -> str:
    return (f"not converted (a tmpfs mount has no equivalent; {target} is the image's "
            "directory, on the cell's disk)")
