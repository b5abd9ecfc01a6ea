"""Pull policy, the cause of a failed pull, the pull record and layer bars, without an engine
(the engine's own answers are exercised in tests/backends/container/test_pull.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from devcell import progress
from devcell.backends.container import images
from devcell.backends.container.pull_progress import LayerBars
from devcell.errors import BackendError, ImagePullFailed, retry_delay
from tests.test_progress import Recorder


def test_the_default_policy_is_if_not_present_even_for_latest() -> None:
    assert images.policy_of({"image": "x/y:latest"}) is images.PullPolicy.IF_NOT_PRESENT
    assert images.policy_of({"imagePullPolicy": "Always"}) is images.PullPolicy.ALWAYS


@pytest.mark.parametrize(("image", "registry"), [
    ("busybox", "docker.io"), ("library/busybox:1", "docker.io"),
    ("127.0.0.1:5000/a/b:1", "127.0.0.1:5000"), ("ghcr.io/o/i@sha256:ab", "ghcr.io"),
    ("localhost/x", "localhost")])
def test_registry_of_a_reference(image: str, registry: str) -> None:
    assert images.registry_of(image) == registry


@pytest.mark.parametrize(("message", "status", "cause"), [
    ('manifest for r/x:1 not found: manifest unknown: manifest unknown', 404, "not-found"),
    ('Head "http://127.0.0.1:1/v2/x/manifests/1": no basic auth credentials', 500,
     "unauthorized"),
    ("pull access denied for x, repository does not exist or may require 'docker login'", 404,
     "unauthorized"),
    ('Get "http://127.0.0.1:9/v2/": dial tcp 127.0.0.1:9: connect: connection refused', 500,
     "unreachable"),
    ("UnixHTTPConnectionPool(host='localhost', port=None): Read timed out. (read timeout=120)",
     None, "unreachable"),
    ("something else entirely", 500, "failed")])
def test_a_failed_pull_names_its_cause_and_fix(message: str, status: int | None, cause: str) -> None:
    error = images.pull_failed("127.0.0.1:9/x:1", message, status)
    assert isinstance(error, ImagePullFailed) and error.cause == cause
    assert error.reason == "ImagePullFailed" and retry_delay(error) == 0.0  # temporary
    assert f"({cause})" in str(error) and str(error).count("\n") == 0


def test_the_record_keeps_every_entry_and_earlier_ids(tmp_path: Path) -> None:
    record = images.PullRecord(tmp_path)
    record.add(images.PulledImage("r/a:1", "sha256:1", "sha256:d1", "t1", ["c1"]))
    record.add(images.PulledImage("r/b:1", "sha256:9", None, "t1", ["c2"]))
    record.add(images.PulledImage("r/a:1", "sha256:2", "sha256:d2", "t2", ["c3"]))
    loaded = images.PullRecord(tmp_path).load()
    assert sorted(loaded) == ["r/a:1", "r/b:1"]
    assert loaded["r/a:1"].id == "sha256:2" and loaded["r/a:1"].replaced == ["sha256:1"]
    assert loaded["r/a:1"].cells == ["c1", "c3"]
    assert (tmp_path / images.RECORD_FILE).stat().st_mode & 0o777 == 0o600
    record.update(None, "r/b:1")
    assert list(images.PullRecord(tmp_path).load()) == ["r/a:1"]


def test_parallel_writers_lose_nothing(tmp_path: Path) -> None:
    def add(n: int) -> None:
        images.PullRecord(tmp_path).add(images.PulledImage(f"r/{n}:1", f"sha256:{n}", None, "t"))

    threads = [threading.Thread(target=add, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(images.PullRecord(tmp_path).load()) == 16


def test_the_record_is_never_read_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text('{"images": []}')
    os.symlink(target, tmp_path / images.RECORD_FILE)
    with pytest.raises(BackendError, match="cannot be read.*move it aside"):
        images.PullRecord(tmp_path).load()


@pytest.mark.parametrize("content", [b"{not json", b'{"images": [{"id": 1}]}', b"[]",
                                     b"x" * (images.RECORD_LIMIT + 1)])
def test_a_damaged_record_is_named_with_the_fix(tmp_path: Path, content: bytes) -> None:
    (tmp_path / images.RECORD_FILE).write_bytes(content)
    with pytest.raises(BackendError, match=f"{images.RECORD_FILE}: the record"):
        images.PullRecord(tmp_path).load()


def test_a_fifo_in_place_of_the_record_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / images.RECORD_FILE)
    with pytest.raises(BackendError, match="not a regular file"):
        images.PullRecord(tmp_path).load()


def events(layer: str, total: int) -> list[dict[str, Any]]:
    return [{"status": "Pulling fs layer", "id": layer},
            *({"status": "Downloading", "id": layer,
               "progressDetail": {"current": c, "total": total}} for c in (10, total // 2)),
            {"status": "Download complete", "id": layer},
            {"status": "Extracting", "id": layer, "progressDetail": {"current": 5, "total": 9}},
            {"status": "Pull complete", "id": layer}]


def test_layer_bars_one_task_per_layer_each_completed() -> None:
    recorder = Recorder()
    previous = progress.install(recorder)
    try:
        with LayerBars("r/x:1") as bars:
            for event in [*events("aaa", 1000), {"status": "Already exists", "id": "bbb"},
                          *events("ccc", 5000), {"status": "Digest: sha256:ff"}]:
                bars.feed(event)
    finally:
        progress.install(previous)
    tasks = sorted(recorder.tasks.values(), key=lambda t: t["description"])
    assert [t["description"] for t in tasks] == ["r/x:1 aaa", "r/x:1 ccc"]
    assert all(t["done"] == t["total"] and t["ended"] for t in tasks)
    assert bars.downloaded == 6000


def test_layer_bars_draw_nothing_without_a_reporter() -> None:
    assert not progress.active()
    with LayerBars("r/x:1") as bars:
        for event in events("aaa", 1000):
            bars.feed(event)
    assert bars.downloaded == 1000 and not bars.layers


def test_small_layers_are_drawn_on_a_terminal() -> None:
    bars = progress.TerminalBars()
    handle = bars.begin("tiny", 10, small=True)
    try:
        assert handle is not None and bars.begin("tiny copy", 10) is None
    finally:
        bars.end(handle)
