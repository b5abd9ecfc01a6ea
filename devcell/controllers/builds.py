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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcell import config, security
from devcell.backends.base import Backend, Building, CellRef
from devcell.errors import CapabilityMissing, ImageBuildFailed

IMPERATIVE = "cli"
"""store.desired.IMPERATIVE: the source of what a verb recorded (`cell fork`)."""
STATUS_KEY = "build"
"""status.build: {"image": the tag the cell's runtime was made from}."""


def building(backend: Backend) -> Building:
    """The backend as a builder, or CapabilityMissing when it cannot build."""
    if not backend.capabilities.builds_images or not isinstance(backend, Building):
        raise CapabilityMissing(f"the {backend.name} backend cannot build images (spec.build); "
                                "use the container backend")
    return backend


def built(spec: dict[str, Any]) -> bool:
    """Whether the cell's image is one DevCell builds (spec.build, spec.features or both)."""
    return spec.get("build") is not None or bool(spec.get("features"))


@dataclass(frozen=True)
class Wanted:
    """The image a built cell wants now and how it is made."""

    tag: str
    build: dict[str, Any]
    """What the build-image step builds (spec.build, or the features' generated context)."""
    base: dict[str, Any] | None = None
    """spec.build's own build when features layer on it: {"name", "tag", "build"}, built
    first when the engine lacks its tag."""
    runtime: dict[str, Any] = field(default_factory=dict)
    """Spec fields the features add to the runtime (feature_builds.with_runtime)."""
    generated: bool = False
    """The build is the features' generated context (not spec.build as the manifest says)."""

    def step_args(self) -> dict[str, Any]:
        """The build-image step's arguments: everything it needs, so a resumed plan builds
        what was planned."""
        args: dict[str, Any] = {"tag": self.tag}
        if self.generated:
            args["build"] = self.build
        if self.base is not None:
            args["base"] = self.base
        return args


def wanted(backend: Backend, ref: CellRef, *, source: str | None, state_dir: Path) -> Wanted:
    """The image `ref.spec`'s build and features name now. Where a build context or a local
    feature folder leads is checked first (the manifest can stay unchanged while its context
    becomes a link out of its tree, and no digest then reads that directory): ImageBuildFailed
    names the problem. A cell a verb recorded (a fork: source IMPERATIVE) has no tree of its
    own: its contexts were judged with the cell it was copied from."""
    spec = ref.spec
    home = os.path.dirname(source) if source and source not in ("-", IMPERATIVE) else None
    policy = config.load(state_dir).security
    if spec.get("build") is not None and home is not None:
        for _, message in security.build_context_problems(spec["build"], home, policy,
                                                          state_dir):
            raise ImageBuildFailed(f"spec.build of cell {ref.name}: {message}")
    builder = building(backend)
    own = builder.build_tag(_based(ref) if spec.get("features") else ref, spec["build"]) \
        if spec.get("build") is not None else None
    if not spec.get("features"):
        assert own is not None
        return Wanted(own, spec["build"])
    from devcell.controllers import feature_builds
    from devcell.manifests import feature_refs

    for i, entry in enumerate(spec["features"]):
        if home is not None and feature_refs.is_local(entry["ref"]):
            problem = security.feature_folder_problem(entry["ref"], home, policy, state_dir)
            if problem:
                raise ImageBuildFailed(f"spec.features[{i}] of cell {ref.name}: {problem}")
    prepared = feature_builds.prepare(spec, ref.name, own or str(spec["image"]), state_dir)
    base = None if own is None else {"name": _based(ref).name, "tag": own,
                                     "build": spec["build"]}
    return Wanted(builder.build_tag(ref, prepared.build), prepared.build, base,
                  prepared.runtime, generated=True)


def _based(ref: CellRef) -> CellRef:
    from devcell.controllers.feature_builds import BASE_SUFFIX

    return ref.replace(name=ref.name + BASE_SUFFIX)


def wanted_tag(backend: Backend, ref: CellRef, *, source: str | None, state_dir: Path) -> str:
    """The tag the cell's build names now (wanted)."""
    return wanted(backend, ref, source=source, state_dir=state_dir).tag


def build_image(backend: Backend, ref: CellRef, args: dict[str, Any]) -> Any:
    """The build-image step: spec.build's own image first when features layer on it and the
    engine lacks it, then the cell's."""
    builder = building(backend)
    base = args.get("base")
    if base is not None and not builder.image_exists(base["tag"]):
        builder.build_image(ref.replace(name=base["name"]), base["build"],
                            base["tag"])
    build = args.get("build") or ref.spec["build"]
    if args.get("build") is not None:  # the features' context: hand the image back to its user
        from devcell.backends.features.context import USER_ARG

        image = base["tag"] if base is not None else ref.spec.get("image")
        asker = getattr(builder, "image_user", None)
        user = asker(str(image)) if asker is not None and image else None
        if isinstance(user, str) and _IMAGE_USER.fullmatch(user):
            # Not part of the tag's digest: the same FROM always names the same user.
            build = {**build, "args": {**(build.get("args") or {}), USER_ARG: user}}
    return builder.build_image(ref, build, args["tag"])


_IMAGE_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?")


def delete_images(backend: Backend, ref: CellRef) -> Any:
    """Every image built for the cell: its own and, with features on spec.build, spec.build's."""
    builder = building(backend)
    removed = 0
    for which in (ref, _based(ref)):  # the cell's first: the engine keeps a parent in use
        removed += int(builder.delete_built_images(which).get("removed") or 0)
    return {"removed": removed}


def recorded_image(status: dict[str, Any]) -> str | None:
    """The tag the cell's runtime was made from, as its last reconcile recorded it (None: not
    recorded, a cell made before DevCell kept it)."""
    found = (status.get(STATUS_KEY) or {}).get("image")
    return found if isinstance(found, str) else None


def with_recorded(status: dict[str, Any], image: str) -> dict[str, Any]:
    """`status` saying the runtime was made from `image` (its sidecars' builds kept)."""
    return {**status, STATUS_KEY: {**(status.get(STATUS_KEY) or {}), "image": image}}


def recorded_sidecars(status: dict[str, Any]) -> dict[str, str]:
    """The tags the cell's built sidecars run, as its last reconcile recorded them."""
    found = (status.get(STATUS_KEY) or {}).get("sidecars")
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def with_sidecars_recorded(status: dict[str, Any], tags: dict[str, str]) -> dict[str, Any]:
    """`status` saying the built sidecars run `tags` (sidecar name -> tag)."""
    return {**status, STATUS_KEY: {**(status.get(STATUS_KEY) or {}), "sidecars": dict(tags)}}
