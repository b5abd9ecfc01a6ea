"""Names for shell completion: live objects only, by prefix taken literally, read-only, and
nothing at all (never an error) when the state cannot be read."""

from __future__ import annotations

from pathlib import Path

from devcell.api import apply as api
from devcell.store import completion

CELL = "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {}}}\nspec: {{backend: fake}}\n"


def _apply(state: Path, tmp_path: Path, *names: str) -> None:
    manifests = tmp_path / "m"
    manifests.mkdir(exist_ok=True)
    for old in manifests.iterdir():
        old.unlink()
    for name in names:
        (manifests / f"{name}.yaml").write_text(CELL.format(name))
    api.apply(state, [str(manifests)], prune=True)


def test_live_names_by_prefix_and_never_deleted_ones(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _apply(state, tmp_path, "c0-a", "c0-b", "c1", "gone")
    _apply(state, tmp_path, "c0-a", "c0-b", "c1")  # prune deletes `gone`
    assert completion.names(state, "cells", "c0") == ["c0-a", "c0-b"]
    assert completion.names(state, "cells") == ["c0-a", "c0-b", "c1"]
    assert completion.names(state, "cells", "g") == []
    assert completion.names(state, "cells", "%") == []  # LIKE's wildcards are literal
    assert completion.names(state, "cells", "c_") == []
    ops = completion.names(state, "operations", "op_")
    assert ops and all(op.startswith("op_") for op in ops)
    assert completion.names(state, "widgets") == []


def test_no_state_or_an_unreadable_one_gives_no_names_and_creates_nothing(tmp_path: Path
                                                                         ) -> None:
    missing = tmp_path / "missing"
    assert completion.names(missing, "cells") == []
    assert not missing.exists()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "state.db").write_bytes(b"this is not a database" * 100)
    assert completion.names(broken, "cells") == []
    assert sorted(p.name for p in broken.iterdir()) == ["state.db"]


def test_a_state_dir_with_uri_characters_is_the_one_read_and_nothing_is_created(
        tmp_path: Path) -> None:
    for odd in ("a#b", "p%41", "x?mode=rwc&y="):
        state = tmp_path / odd
        _apply(state, tmp_path, "c0")
        assert completion.names(state, "cells", "c") == ["c0"]
    assert not (tmp_path / "x").exists()  # `?mode=rwc` must not open (create) tmp_path/x
    assert not (tmp_path / "a").exists()
