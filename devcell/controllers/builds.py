"""The image a cell's spec.build names now, and the one its runtime was made from.

One judgement for everyone who must say whether a built cell is up to date: the cell
controller (which plans the rebuild), and `apply` and `diff` (which must say so: a change to
the build's inputs alone, a Dockerfile edited with the manifest unchanged, is a difference,
reported `rebuilt`, never `unchanged`). The tag names a digest of what the build would send
(the backend's `Building.build_tag`, answered by its digest cache from a walk when nothing
changed); the tag the runtime was made from is kept in the cell's status (`status.build.image`),
so the comparison needs neither the engine nor a build.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from devcell import config, security
from devcell.backends.base import Backend, Building, CellRef
from devcell.errors import CapabilityMissing, ImageBuildFailed

STATUS_KEY = "build"
"""status.build: {"image": the tag the cell's runtime was made from}."""


def building(backend: Backend) -> Building:
    """The backend as a builder, or CapabilityMissing when it cannot build."""
    if not backend.capabilities.builds_images or not isinstance(backend, Building):
        raise CapabilityMissing(f"the {backend.name} backend cannot build images (spec.build); "
                                "use the container backend")
    return backend


def wanted_tag(backend: Backend, ref: CellRef, *, source: str | None, state_dir: Path) -> str:
    """The tag `ref.spec["build"]` names now. Where the context leads is checked first (the
    manifest can stay unchanged while its context becomes a link out of its tree, and no
    digest then reads that directory): ImageBuildFailed names the problem."""
    if source and source != "-":
        policy = config.load(state_dir).security
        for _, message in security.build_context_problems(
                ref.spec["build"], os.path.dirname(source), policy, state_dir):
            raise ImageBuildFailed(f"spec.build of cell {ref.name}: {message}")
    return building(backend).build_tag(ref, ref.spec["build"])


def recorded_image(status: dict[str, Any]) -> str | None:
    """The tag the cell's runtime was made from, as its last reconcile recorded it (None: not
    recorded, a cell made before DevCell kept it)."""
    found = (status.get(STATUS_KEY) or {}).get("image")
    return found if isinstance(found, str) else None


def with_recorded(status: dict[str, Any], image: str) -> dict[str, Any]:
    """`status` saying the runtime was made from `image`."""
    return {**status, STATUS_KEY: {"image": image}}
