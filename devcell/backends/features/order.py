"""The order features are installed in, as the specification's algorithm makes it.

Each feature waits for those its metadata names in `dependsOn` (hard: the named feature must
be in spec.features, never fetched unasked) and `installsAfter` (soft: ignored when the named
feature is not there). Installation goes in rounds: every feature whose predecessors are all
installed goes in the next round; within a round, in the order spec.features lists them
(devcontainer.json's overrideFeatureInstallOrder becomes that list's order on import). A
cycle is refused naming its features.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from devcell.backends.features.metadata import Feature
from devcell.errors import ImageBuildFailed
from devcell.manifests import feature_refs as refs


@dataclass(frozen=True)
class Placed:
    """A resolved feature to order: its reference, its metadata, its place in the list."""

    ref: refs.Ref
    feature: Feature
    shown: str


def _key(name: str) -> str:
    try:
        parsed = refs.parse(name)
    except ValueError:
        return name
    return parsed.resource


def _matches(name: str, placed: Placed) -> bool:
    return _key(name) == placed.ref.resource or (
        placed.ref.kind is not refs.Kind.OCI and name == placed.feature.id)


def install_order(features: Sequence[Placed]) -> list[int]:
    """Indexes into `features` in installation order; ImageBuildFailed for a dependsOn that
    names no listed feature, or a cycle."""
    after: list[set[int]] = []
    for i, placed in enumerate(features):
        wanted: set[int] = set()
        for name in placed.feature.depends_on:
            found = [j for j, other in enumerate(features) if j != i and _matches(name, other)]
            if not found:
                raise ImageBuildFailed(
                    f"feature {placed.shown} depends on {name} (dependsOn of its metadata), "
                    "which spec.features does not list; add it (DevCell installs only the "
                    "features a manifest names)")
            wanted.update(found)
        for name in placed.feature.installs_after:
            wanted.update(j for j, other in enumerate(features) if j != i and _matches(name, other))
        after.append(wanted)
    done: list[int] = []
    left = set(range(len(features)))
    while left:
        ready = sorted(i for i in left if after[i] <= set(done))
        if not ready:
            names = ", ".join(features[i].shown for i in sorted(left))
            raise ImageBuildFailed(f"features {names} wait for each other (installsAfter / "
                                   "dependsOn form a cycle); none can be installed first")
        done.extend(ready)
        left.difference_update(ready)
    return done
