"""The build digest's cache: an unchanged context is answered from a walk with lstat alone,
any change (content, an entry added or removed, .dockerignore, metadata put back) computes
the digest again, and the value is always container_build.digest's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.container import build as container_build
from devcell.backends.container import build_digest_cache


@pytest.fixture
def context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(build_digest_cache, "RACY_SECONDS", 0.0)
    root = tmp_path / "ctx"
    for i in range(30):
        (root / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 3}" / f"f{i}.txt").write_text(f"file {i}\n")
    (root / "Dockerfile").write_text("FROM scratch\n")
    (root / ".dockerignore").write_text("*.log\n")
    return root


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, build: dict[str, Any]) -> str:
        self.calls += 1
        return container_build.digest(build)


def _digest(state: Path, build: dict[str, Any], compute: Counting) -> str:
    return build_digest_cache.DigestCache(state).digest("web", build, compute,
                                                        cell_id="cell_web")


def test_an_unchanged_context_is_not_hashed_again(context: Path, tmp_path: Path) -> None:
    build, compute = {"context": str(context)}, Counting()
    first = _digest(tmp_path / "state", build, compute)
    assert first == container_build.digest(build) and compute.calls == 1
    assert _digest(tmp_path / "state", build, compute) == first and compute.calls == 1
    cached = tmp_path / "state" / "build-digests" / "web.json"
    assert oct(cached.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("change", ["content", "content-times-restored", "added", "removed",
                                    "ignored-added", "dockerignore", "chmod", "renamed"])
def test_every_change_computes_the_digest_again(context: Path, tmp_path: Path,
                                                change: str) -> None:
    build, compute = {"context": str(context)}, Counting()
    first = _digest(tmp_path / "state", build, compute)
    target = context / "d1" / "f1.txt"
    if change == "content":
        target.write_text("FILE 1\n")
    elif change == "content-times-restored":  # same size, mtime put back: ctime still moves
        st = target.stat()
        target.write_text("FILE 1\n")
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif change == "added":
        (context / "d2" / "new.txt").write_text("new\n")
    elif change == "removed":
        target.unlink()
    elif change == "ignored-added":
        (context / "debug.log").write_text("x\n")  # *.log is anchored at the root
    elif change == "dockerignore":
        (context / ".dockerignore").write_text("*.log\nd1/\n")
    elif change == "chmod":
        target.chmod(0o755)
    elif change == "renamed":
        target.rename(context / "d1" / "g1.txt")
    again = _digest(tmp_path / "state", build, compute)
    assert compute.calls == 2
    assert again == container_build.digest(build)
    assert (again == first) is (change == "ignored-added")


def test_args_target_and_dockerfile_are_part_of_the_key(context: Path, tmp_path: Path) -> None:
    compute = Counting()
    plain = _digest(tmp_path / "state", {"context": str(context)}, compute)
    with_args = _digest(tmp_path / "state", {"context": str(context), "args": {"A": "1"}},
                        compute)
    assert compute.calls == 2 and with_args != plain
    assert _digest(tmp_path / "state", {"context": str(context), "target": "dev"},
                   compute) != plain


def test_a_context_changed_within_the_racy_window_is_not_cached(
        context: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_digest_cache, "RACY_SECONDS", 3600.0)
    build, compute = {"context": str(context)}, Counting()
    _digest(tmp_path / "state", build, compute)
    _digest(tmp_path / "state", build, compute)
    assert compute.calls == 2
    assert not (tmp_path / "state" / "build-digests" / "web.json").exists()


def test_a_cache_file_that_is_a_link_is_not_followed(context: Path, tmp_path: Path) -> None:
    build = {"context": str(context)}
    key, _ = build_digest_cache.tree_key(build)
    elsewhere = tmp_path / "forged.json"
    elsewhere.write_text(f'{{"version": 1, "key": "{key}", "digest": "forged"}}')
    (tmp_path / "state" / "build-digests").mkdir(parents=True)
    (tmp_path / "state" / "build-digests" / "web.json").symlink_to(elsewhere)
    cache = build_digest_cache.DigestCache(tmp_path / "state")
    assert cache.get("web", key) is None


def test_a_linked_directory_is_not_walked_into(context: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.bin").write_text("x")
    (context / "link").symlink_to(outside)
    build, compute = {"context": str(context)}, Counting()
    first = _digest(tmp_path / "state", build, compute)
    (outside / "big.bin").write_text("changed outside")
    assert _digest(tmp_path / "state", build, compute) == first and compute.calls == 1
    assert first == container_build.digest(build)  # the build sends the link, not its target


def test_a_change_to_a_dockerfile_outside_the_context_computes_it_again(
        context: Path, tmp_path: Path) -> None:
    outside = tmp_path / "Dockerfile.dev"
    outside.write_text("FROM scratch\n")
    build, compute = {"context": str(context), "dockerfile": "../Dockerfile.dev"}, Counting()
    first = _digest(tmp_path / "state", build, compute)
    assert _digest(tmp_path / "state", build, compute) == first and compute.calls == 1
    outside.write_text("FROM scratch\nENV A=1\n")
    assert _digest(tmp_path / "state", build, compute) != first and compute.calls == 2
