"""devcell.manifests.validator_cache: a kind's compiled validator is kept between commands,
and an entry is loaded only when it is safely the user's own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import fastjsonschema
import pytest

from devcell import schemas
from devcell.manifests import validator_cache

GOOD = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": "api"},
        "spec": {"backend": "fake"}}
BAD = {**GOOD, "spec": {"backend": "fake", "state": "Dancing"}}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "devcell" / "validators"


def _judges(validate: Any) -> tuple[bool, bool]:
    def ok(document: dict[str, Any]) -> bool:
        try:
            validate(document)
        except fastjsonschema.JsonSchemaException:
            return False
        return True
    return ok(GOOD), ok(BAD)


def _no_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("compiled again: the cache was not used")
    monkeypatch.setattr(fastjsonschema, "compile_to_code", refuse)


def test_the_second_command_loads_what_the_first_compiled(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = schemas.schema_text("Cell")
    assert _judges(validator_cache.validator("Cell", text)) == (True, False)
    [entry] = cache.iterdir()
    assert entry.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o777 == 0o700
    _no_compiling(monkeypatch)
    assert _judges(validator_cache.validator("Cell", text)) == (True, False)


def test_another_schema_text_is_another_entry(cache: Path) -> None:
    text = schemas.schema_text("Cell")
    validator_cache.validator("Cell", text)
    validator_cache.validator("Cell", text + "\n")
    assert len(list(cache.iterdir())) == 2


@pytest.mark.parametrize("spoil", ["damaged", "group-writable", "link", "other-owner"])
def test_an_entry_not_safely_the_users_own_is_never_loaded(
        cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spoil: str) -> None:
    text = schemas.schema_text("Cell")
    validator_cache.validator("Cell", text)
    [entry] = cache.iterdir()
    if spoil == "damaged":
        entry.write_bytes(b"\x00not marshal data")
    elif spoil == "group-writable":
        entry.chmod(0o664)
    elif spoil == "link":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.write_bytes(entry.read_bytes())
        entry.unlink()
        entry.symlink_to(elsewhere)
    else:
        if os.geteuid() != 0:
            pytest.skip("changing a file's owner needs root")
        os.chown(entry, 65534, 65534)
    loaded: list[str] = []
    real = fastjsonschema.compile_to_code

    def counted(*args: Any, **kwargs: Any) -> str:
        loaded.append("compiled")
        return real(*args, **kwargs)
    monkeypatch.setattr(fastjsonschema, "compile_to_code", counted)
    assert _judges(validator_cache.validator("Cell", text)) == (True, False)
    assert loaded == ["compiled"]


def test_a_cache_that_cannot_be_written_is_no_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert _judges(validator_cache.validator("Cell", schemas.schema_text("Cell"))) == (
        True, False)
