"""The forms the Dev Container specification's templates take with Features, Docker Compose
and runArgs (our own samples: tests/devcontainer_samples.py) convert with `devcell import
devcontainer` and apply with `devcell apply --dry-run`, under a configuration granting what
each needs; each field is carried into the manifest or named, none dropped silently. The
Features they name are served by a local registry (ghcr.io mirrored to it). The two commands
run in-process (tests/cli/inprocess.py), in their own working directory and environment: the
CLI's start-up as a process is covered by the other e2e tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import devcontainer_corpus as corpus
from tests import devcontainer_samples as samples

pytestmark = pytest.mark.e2e


def _dig(data: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


@pytest.mark.parametrize("sample", samples.SAMPLES, ids=lambda s: s.name)
def test_a_template_form_converts_and_applies(sample: samples.Sample, tmp_path: Path,
                                              feature_mirror: dict[str, Any]) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    project = tmp_path / sample.name
    source = sample.lay_down(project)
    security = {"allowedHostPaths": [str(home)],
                **corpus.known_settings("security", sample.security)}
    outcome = corpus.import_and_dry_run(
        sample.name, _data(source), source, project, tmp_path / "state",
        config={"security": security, **feature_mirror}, env={"HOME": str(home)},
        in_process=True)
    assert outcome.status == "converted", (outcome.refused, outcome.detail, outcome.notes)
    assert not outcome.silent, outcome.silent
    for dotted in sample.expect:
        assert _dig(outcome.manifest, dotted), (dotted, outcome.manifest)


def _data(source: Path) -> dict[str, Any]:
    import json5

    loaded: dict[str, Any] = json5.loads(source.read_text())
    return loaded



@pytest.fixture(scope="module")
def feature_mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One local registry for the module, serving every Feature the samples name."""
    features = {}
    for sample in samples.SAMPLES:
        features.update(corpus.sample_features(sample.features))
    registry = corpus.serve_features(tmp_path_factory.mktemp("registry"), features)
    images = corpus.known_settings("images", {"registryMirrors": {"ghcr.io": registry.address}})
    yield {"images": images} if images else {}
    registry.stop()
