"""Lists encoded once per state of the database (server.lists): the same bytes for every
request of the same list and view while nothing commits, a new encoding after any commit (from
another connection or process), one encoding for requests that arrive together, and never
the bytes of another view. In process against a real state database, then through the
session's real server.

Cost: ~0.5 s in process; the server's part ~1 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from devcell.auth import policy, principals
from devcell.server import lists
from devcell.store.db import Database
from tests.server.conftest import Api
from tests.server.test_app import YAML, cell, wait_for


@pytest.fixture
def state(tmp_path: Path) -> Path:
    db = Database(tmp_path, create=True)
    db.conn.execute("CREATE TABLE bench_writes (x INTEGER)")
    db.close()
    return tmp_path


def commit_elsewhere(state: Path) -> None:
    """A commit from another connection (as the reconciler's or another process's)."""
    db = Database(state, create=False)
    try:
        db.conn.execute("INSERT INTO bench_writes VALUES (1)")
    finally:
        db.close()


def test_same_list_and_state_is_encoded_once(state: Path) -> None:
    made: list[int] = []

    def produce() -> bytes:
        made.append(1)
        return json.dumps({"n": len(made)}).encode()

    async def main() -> list[bytes]:
        shared = lists.Lists(lambda: Database(state, create=False))
        got: list[bytes] = []
        try:
            async with anyio.create_task_group() as tg:  # arriving together: one encoding
                for _ in range(5):
                    tg.start_soon(lambda: _append(got, shared.body("k", produce)))
            got.append(await shared.body("k", produce))  # nothing committed: the same bytes
            commit_elsewhere(state)
            got.append(await shared.body("k", produce))  # a commit: encoded anew
            got.append(await shared.body("other", produce))  # another key: its own
        finally:
            shared.close()
        return got

    got = anyio.run(main)
    assert got[:6] == [b'{"n": 1}'] * 6
    assert got[6] == b'{"n": 2}' and got[7] == b'{"n": 3}'
    assert len(made) == 3


async def _append(out: list[bytes], pending: object) -> None:
    out.append(await pending)  # type: ignore[misc]


def test_a_request_gets_the_first_reading_begun_after_it_arrived(state: Path) -> None:
    """Requests that arrived before a reading began take its bytes even when commits land
    during it (it includes every commit before them); one that arrived after it began, with a
    commit since, gets a new reading."""
    import time

    calls: list[int] = []

    def produce() -> bytes:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.3)
            commit_elsewhere(state)  # during the first reading
        return str(len(calls)).encode()

    async def main() -> dict[str, bytes]:
        shared = lists.Lists(lambda: Database(state, create=False))
        got: dict[str, bytes] = {}

        async def ask(who: str) -> None:
            got[who] = await shared.body("k", produce)
        try:
            async with anyio.create_task_group() as tg:
                for who in ("a1", "a2", "a3"):
                    tg.start_soon(ask, who)
                await anyio.sleep(0.1)  # the first reading has begun
                tg.start_soon(ask, "late")
        finally:
            shared.close()
        return got

    assert anyio.run(main) == {"a1": b"1", "a2": b"1", "a3": b"1", "late": b"2"}
    assert len(calls) == 2


def test_a_view_that_differs_never_gets_another_s_bytes(state: Path) -> None:
    """The key carries the view: two views of the same list at the same state are two
    encodings, each served only to its own."""
    async def main() -> tuple[bytes, bytes, bytes]:
        shared = lists.Lists(lambda: Database(state, create=False))
        try:
            ana = await shared.body(("list", "cells", "view-ana"), lambda: b"ana's")
            bob = await shared.body(("list", "cells", "view-bob"), lambda: b"bob's")
            again = await shared.body(("list", "cells", "view-ana"), lambda: b"not kept")
            return ana, bob, again
        finally:
            shared.close()

    assert anyio.run(main) == (b"ana's", b"bob's", b"ana's")


def test_every_role_has_one_view_today() -> None:
    """Rule `read`: every role lists every object, secrets redacted, so one encoding serves
    them all; a rule that changed that must change policy.list_view."""
    views = {policy.list_view(principals.Principal(user=u, role=r))
             for u, r in (("ana", principals.Role.viewer), ("bob", principals.Role.developer),
                          ("root", principals.Role.admin))}
    assert views == {policy.LIST_VIEW}


def test_kept_encodings_are_bounded(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lists, "KEEP_BYTES", 10)

    async def main() -> int:
        shared = lists.Lists(lambda: Database(state, create=False))
        try:
            for key in range(5):
                await shared.body(key, lambda: b"123456")
            return len(shared._kept)
        finally:
            shared.close()

    assert anyio.run(main) == 1


def test_pieces_are_the_body() -> None:
    body = bytes(range(256)) * 3000

    async def main() -> list[bytes]:
        return [p async for p in lists.pieces(body)]

    got = anyio.run(main)
    assert b"".join(got) == body and max(len(p) for p in got) <= lists.CHUNK_BYTES


# -- through the server ------------------------------------------------------------------------


def test_every_role_lists_the_same_redacted_bytes(api: Api) -> None:
    wait_for(api, "/api/v1/cells/seed", lambda r: r.status_code == 200)
    tokens = [api.token("lists-viewer", "viewer"), api.token("lists-dev", "developer")]
    with api.tls_client(tokens[0]) as viewer, api.tls_client(tokens[1]) as developer:
        for _ in range(20):  # a commit between them (a reconcile) makes each its own state
            listed = [c.get("/api/v1/cells") for c in (api.client, viewer, developer)]
            assert all(r.status_code == 200 for r in listed)
            if len({r.content for r in listed}) == 1:
                break
        else:
            pytest.fail("the three lists never agreed")
    seed = next(c for c in listed[0].json()["items"] if c["metadata"]["name"] == "seed")
    assert seed["spec"]["env"][0]["value"] == "<redacted>"
    assert b"not-a-secret" not in listed[0].content


def test_a_list_after_a_commit_is_never_the_one_before(api: Api) -> None:
    before = api.client.get("/api/v1/cells")
    applied = api.client.post("/api/v1/apply", content=cell("lists-fresh", team="lists"),
                              headers=YAML)
    assert applied.status_code == 200, applied.text
    after = api.client.get("/api/v1/cells")
    names = [c["metadata"]["name"] for c in after.json()["items"]]
    assert "lists-fresh" in names
    assert int(after.json()["metadata"]["resourceVersion"]) > \
        int(before.json()["metadata"]["resourceVersion"])
    assert int(after.headers["content-length"]) == len(after.content)
    api.client.delete("/api/v1/cells/lists-fresh")


def test_a_list_re_encoded_from_its_changed_objects_is_the_whole_encoding(
        state_dir: Path) -> None:
    """server.lists.Fragments: after changes (a column written without a resourceVersion
    bump, a snapshot in a cell's lineage, a new cell, a deleted one) the body built from
    the kept pieces is byte for byte the whole list encoded afresh, and an unchanged cell's
    piece is the one kept."""
    from devcell.api import apply
    from devcell.manifests import loader
    from devcell.server import app
    from devcell.server.routes import RESOURCES

    def applied(text: str) -> None:
        assert apply.apply_sources(state_dir, [loader.from_bytes("m.yaml", text.encode())]).ok

    for name in ("a", "b", "c"):
        applied(cell(name, team="x"))
    ctx = app.Context(state_dir, tokens=False)
    pieces = lists.Fragments()

    def both() -> tuple[bytes, bytes]:
        return (app._list_sync(ctx, RESOURCES["cells"], None, None, pieces=pieces),
                app._list_sync(ctx, RESOURCES["cells"], None, None))

    fragmented, whole = both()
    assert fragmented == whole and json.loads(whole)["items"][0]["metadata"]["name"] == "a"
    a_id = json.loads(whole)["items"][0]["metadata"]["id"]
    kept_a = pieces.pieces[a_id]
    db = Database(state_dir, create=False)
    db.conn.execute("UPDATE cells SET owner = 'someone' WHERE name = 'b'")
    db.conn.execute("UPDATE cells SET deleted_at = '2026-01-01T00:00:00Z' WHERE name = 'c'")
    db.close()
    applied(cell("d", team="x"))
    applied("apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: {name: s}\n"
            "spec: {cell: b}\n")
    fragmented, whole = both()
    assert fragmented == whole
    names = [c["metadata"]["name"] for c in json.loads(whole)["items"]]
    assert names == ["a", "b", "d"]
    b_doc = json.loads(whole)["items"][1]
    assert b_doc["metadata"]["owner"] == "someone"
    assert b_doc["status"]["lineage"]["snapshots"] == ["s"]
    assert pieces.pieces[a_id] is kept_a
