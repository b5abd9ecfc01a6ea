"""Install order as the specification's rounds make it: dependsOn (hard) and installsAfter
(soft) first, then the list's order within a round."""

from __future__ import annotations

import pytest

from devcell.backends.features import order
from devcell.backends.features.metadata import Feature
from devcell.errors import ImageBuildFailed
from devcell.manifests import feature_refs

GHCR = "ghcr.io/devcontainers/features"


def _placed(ref: str, fid: str, **kw: tuple[str, ...]) -> order.Placed:
    return order.Placed(feature_refs.parse(ref), Feature(id=fid, **kw), ref)  # type: ignore[arg-type]


def _ids(features: list[order.Placed]) -> list[str]:
    return [features[i].feature.id for i in order.install_order(features)]


def test_installs_after_moves_a_feature_behind_the_one_it_names() -> None:
    features = [_placed(f"{GHCR}/node:1", "node", installs_after=(f"{GHCR}/common-utils",)),
                _placed(f"{GHCR}/git:1", "git"),
                _placed(f"{GHCR}/common-utils:2", "common-utils")]
    assert _ids(features) == ["git", "common-utils", "node"]


def test_rounds_keep_ready_features_together_in_list_order() -> None:
    features = [_placed(f"{GHCR}/p:1", "p"),
                _placed(f"{GHCR}/q:1", "q", installs_after=(f"{GHCR}/p",)),
                _placed(f"{GHCR}/r:1", "r"), _placed(f"{GHCR}/s:1", "s")]
    assert _ids(features) == ["p", "r", "s", "q"]


def test_installs_after_an_absent_feature_is_ignored_and_local_ones_match_by_id() -> None:
    features = [_placed("/p/greeting", "greeting", installs_after=("world", f"{GHCR}/none")),
                _placed("/p/world", "world")]
    assert _ids(features) == ["world", "greeting"]


def test_depends_on_an_unlisted_feature_is_refused() -> None:
    features = [_placed(f"{GHCR}/node:1", "node", depends_on=(f"{GHCR}/common-utils:2",))]
    with pytest.raises(ImageBuildFailed, match="depends on .*common-utils:2 .*add it"):
        order.install_order(features)


def test_a_cycle_is_refused_naming_its_features() -> None:
    features = [_placed(f"{GHCR}/a:1", "a", installs_after=(f"{GHCR}/b",)),
                _placed(f"{GHCR}/b:1", "b", depends_on=(f"{GHCR}/a:1",))]
    with pytest.raises(ImageBuildFailed, match="wait for each other"):
        order.install_order(features)
