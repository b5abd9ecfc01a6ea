"""`overrideCommand: false` keeps the image's own command as a service
(api/devcontainer_command.py): read from the image's configuration on the engine, or from
the Dockerfile's stages; when it cannot be known, a warning says why."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from devcell.api import devcontainer, devcontainer_command
from tests.api.test_devcontainer import _sample
from tests.backends.engine import IMAGE, require_engine


@pytest.mark.parametrize(("dockerfile", "target", "command"), [
    ('FROM scratch AS base\nCMD ["serve", "--port", "80"]\nFROM base\nWORKDIR /srv\n', None,
     (["serve", "--port", "80"], "/srv")),
    ('FROM scratch AS base\nCMD ["serve"]\nENTRYPOINT ["tini", "--"]\nFROM base AS dev\n'
     'ENTRYPOINT ["/entry"]\n', "dev", (["/entry"], None)),  # a CMD from below is reset
    ("FROM scratch\n# a comment\nCMD python -m http.server \\\n    8000\n", None,
     (["/bin/sh", "-c", "python -m http.server  8000"], None)),
    ('FROM scratch AS one\nCMD ["a"]\nFROM scratch AS two\nCMD ["b"]\n', "one", (["a"], None)),
])
def test_the_command_of_the_stage_built(dockerfile: str, target: str | None,
                                        command: tuple[list[str], str | None]) -> None:
    assert devcontainer_command._from_dockerfile(dockerfile, target) == command


def test_an_unknown_base_image_or_stage_is_said() -> None:
    found = devcontainer_command._from_dockerfile("FROM devcell-test/none:0\nWORKDIR /a\n", None)
    assert isinstance(found, str) and "devcell-test/none:0" in found
    assert devcontainer_command._from_dockerfile("FROM x\n", "dev") == \
        "the Dockerfile has no stage dev"


def test_the_images_command_becomes_a_service(tmp_path: Path) -> None:
    require_engine()
    path = _sample(tmp_path, json.dumps({"image": IMAGE, "overrideCommand": False}))
    result = devcontainer.convert(path, name=None, out_dir=tmp_path,
                                  state_dir=tmp_path / "state", env={})
    assert result.manifest["spec"]["services"] == [{"name": "main", "command": [
        "/bin/sh", "-c", 'cd "$0" && exec "$@"', "/workspace", "/bin/sh"]}]
    assert not [n for n in result.notes if n.startswith("overrideCommand")]
    assert result.problems == []


def test_a_dockerfile_from_a_local_image_inherits_its_command(tmp_path: Path) -> None:
    require_engine()
    path = _sample(tmp_path, json.dumps({"build": {"dockerfile": "Dockerfile"},
                                         "overrideCommand": False}))
    (path.parent / "Dockerfile").write_text(textwrap.dedent(f"""\
        FROM {IMAGE}
        WORKDIR /srv
        """))
    result = devcontainer.convert(path, name=None, out_dir=tmp_path,
                                  state_dir=tmp_path / "state", env={})
    assert result.manifest["spec"]["services"] == [{"name": "main", "command": [
        "/bin/sh", "-c", 'cd "$0" && exec "$@"', "/srv", "/bin/sh"]}]


def test_an_image_the_engine_lacks_is_warned_about(tmp_path: Path) -> None:
    path = _sample(tmp_path, json.dumps({"image": "devcell-test/absent:1",
                                         "overrideCommand": False}))
    result = devcontainer.convert(path, name=None, out_dir=tmp_path,
                                  state_dir=tmp_path / "state", env={})
    assert "services" not in result.manifest["spec"]
    assert [n for n in result.notes if n.startswith(
        "overrideCommand: false: not converted (the engine has no image devcell-test/absent:1")]


def test_a_fifo_as_the_dockerfile_is_said_not_waited_on(tmp_path: Path) -> None:
    """A FIFO planted as the Dockerfile (a cell writing its live workspace can) held the
    import for ever: opening one for reading waits for a writer."""
    path = _sample(tmp_path, json.dumps({"build": {"dockerfile": "Dockerfile"},
                                         "overrideCommand": False}))
    os.mkfifo(path.parent / "Dockerfile")
    began = time.monotonic()
    with pytest.raises(devcontainer.Refused, match="is not a file on this host") as refused:
        devcontainer.convert(path, name=None, out_dir=tmp_path, state_dir=tmp_path / "state",
                             env={})
    assert time.monotonic() - began < 10
    assert [n for n in refused.value.notes if "a FIFO, not a regular file" in n]
