"""What each API client applied from each of its paths, and what its prune deletes
(store/client_sets.py), through the apply the server makes (api.apply.apply_sources with a
ClientSet): a prune deletes only what the same user applied from under the paths it names
that the stream no longer declares; never another user's, nor an object a file (or standard
input) applied since, nor one the caller may not delete (then nothing is recorded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcell.api import apply, converging
from devcell.errors import Forbidden
from devcell.manifests import loader, selectors
from devcell.store import client_sets, objects
from devcell.store.db import open_database


def _cell(name: str, **labels: str) -> str:
    shown = ", ".join(f"{k}: {v}" for k, v in labels.items())
    return (f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}, "
            f"labels: {{{shown}}}}}\nspec:\n  backend: fake\n  image: devcell/busybox:latest\n")


def _apply(state: Path, user: str, origins: list[tuple[int, str]], *docs: str,
           prune: bool = False, selector: str | None = None, may_delete: Any = None,
           dry_run: bool = False) -> dict[str, str]:
    """(name -> outcome) of an apply of `docs` as one stream, as the server makes it."""
    stream = "---\n".join(docs).encode()
    applied = client_sets.ClientSet(user, tuple(origins), prune=prune,
                                    selector=selectors.parse(selector) if selector else None,
                                    may_delete=may_delete)
    report = apply.apply_sources(state, [loader.from_bytes("request.yaml", stream)],
                                 dry_run=dry_run, client_set=applied,
                                 options=converging.Options(wait=False))
    return {c.name: c.outcome for c in report.recorded.changes}


def _live(state: Path) -> list[str]:
    db = open_database(state)
    try:
        return sorted(c.name for c in objects.list_live(db.conn, "Cell") if not c.deleting)
    finally:
        db.close()


def test_a_prune_deletes_what_the_user_applied_from_its_paths(state: Path) -> None:
    # a.yaml and b.yaml from /m (the stream's lines 1 and 7), c from another path
    assert _apply(state, "ana", [(1, "/m"), (13, "/other")], _cell("a"), _cell("b"),
                  _cell("c")) == {"a": "created", "b": "created", "c": "created"}
    assert _apply(state, "ana", [(1, "/m")], _cell("a"), prune=True, dry_run=True) == {
        "a": "unchanged", "b": "pruned"}
    assert _live(state) == ["a", "b", "c"]  # a dry run deletes nothing
    assert _apply(state, "ana", [(1, "/m")], _cell("a"), prune=True) == {
        "a": "unchanged", "b": "pruned"}
    assert _live(state) == ["a", "c"]
    assert _apply(state, "ana", [(1, "/m")], _cell("a"), prune=True) == {"a": "unchanged"}


def test_a_prune_of_a_folder_takes_what_was_applied_from_under_it(state: Path) -> None:
    _apply(state, "ana", [(1, "/m/sub/x.yaml")], _cell("x"))
    _apply(state, "ana", [(1, "/mx")], _cell("y"))  # /mx is not under /m
    assert _apply(state, "ana", [(1, "/m")], _cell("z"), prune=True) == {
        "z": "created", "x": "pruned"}
    assert _live(state) == ["y", "z"]


def test_the_selector_narrows_the_prune(state: Path) -> None:
    _apply(state, "ana", [(1, "/m")], _cell("a", tier="x"), _cell("b", tier="y"),
           _cell("c", tier="x"))
    assert _apply(state, "ana", [(1, "/m")], _cell("a", tier="x"), prune=True,
                  selector="tier=y") == {"a": "unchanged", "b": "pruned"}
    assert _live(state) == ["a", "c"]


def test_another_users_paths_are_their_own(state: Path) -> None:
    _apply(state, "ana", [(1, "/m")], _cell("a"))
    _apply(state, "bob", [(1, "/m")], _cell("b"))
    assert _apply(state, "ana", [(1, "/m")], _cell("c"), prune=True) == {
        "c": "created", "a": "pruned"}
    assert _live(state) == ["b", "c"]


@pytest.mark.parametrize("again", ["stdin", "another path", "a file"])
def test_what_was_applied_again_elsewhere_is_not_pruned(state: Path, tmp_path: Path,
                                                        again: str) -> None:
    """The latest apply of an object is where it comes from, as an object's source is."""
    _apply(state, "ana", [(1, "/m")], _cell("a"), _cell("b"))
    if again == "a file":
        (tmp_path / "b.yaml").write_text(_cell("b"))
        apply.apply(state, [str(tmp_path / "b.yaml")], options=converging.Options(wait=False))
    else:
        _apply(state, "bob", [(1, "/n")] if again == "another path" else [], _cell("b"))
    assert _apply(state, "ana", [(1, "/m")], _cell("a"), prune=True) == {"a": "unchanged"}
    assert _live(state) == ["a", "b"]


def test_one_the_caller_may_not_delete_refuses_the_whole_apply(state: Path) -> None:
    _apply(state, "ana", [(1, "/m")], _cell("a"), _cell("b"))

    def may_delete(conn: Any, kind: str, name: str) -> None:
        raise Forbidden(f"not {kind} {name}", rule="developer-not-own")

    for dry_run in (True, False):
        with pytest.raises(Forbidden, match="not Cell b"):
            _apply(state, "ana", [(1, "/m")], _cell("a"), _cell("new"), prune=True,
                   may_delete=may_delete, dry_run=dry_run)
    assert _live(state) == ["a", "b"]  # nothing recorded: "new" neither
    assert _apply(state, "ana", [(1, "/m")], _cell("a"), prune=True) == {
        "a": "unchanged", "b": "pruned"}


def test_where_a_line_was_read() -> None:
    origins = ((1, "/m"), (9, "-"), (12, "/n"))
    assert [client_sets.path_at(origins, line) for line in (1, 8, 9, 11, 12, 99)] == [
        "/m", "/m", "-", "-", "/n", "/n"]
    assert client_sets.path_at((), 3) == "-"
    assert client_sets.under("/m/a.yaml", ["/m"]) and client_sets.under("/m", ["/m/"])
    assert not client_sets.under("/mx", ["/m"])
