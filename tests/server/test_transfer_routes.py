"""`snapshot export` and `snapshot import` through the API (server/transfer_routes.py) against
the session's real server: the CLI on the state directory, then through the unix socket and
the TLS listener, the same lines and exit codes; the archive streamed whole; the refusals
(a viewer, another developer's cell, a body over the bound, a hostile archive) with nothing
recorded and nothing kept.

In-process CLI runs (main() with captured streams) and httpx; ~3-6 s in all.
"""

from __future__ import annotations

import re
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devcell.cli.main import main
from tests.server.conftest import ARCHIVE_BYTES, Api
from tests.server.test_app import assert_problem, cell, wait_for

TAR = {"Content-Type": "application/x-tar"}


def _ready_snapshot(api: Api, *, owner_token: str | None = None) -> tuple[str, str]:
    """(a cell, a Ready snapshot of it): the admin's, or, with `owner_token`, a cell that
    token's user made over TLS."""
    name = f"xf-{uuid.uuid4().hex[:6]}"
    if owner_token is None:
        made = api.client.post("/api/v1/apply", content=cell(name, team="xfer"),
                               headers={"Content-Type": "application/yaml"})
    else:
        with api.tls_client(owner_token) as c:
            made = c.post("/api/v1/apply", content=cell(name, team="xfer"),
                          headers={"Content-Type": "application/yaml"})
    assert made.status_code == 200, made.text
    wait_for(api, f"/api/v1/cells/{name}", lambda r: r.json()["status"]["phase"] == "Running")
    taken = api.client.post(f"/api/v1/cells/{name}/snapshot", json={"name": f"{name}-s"})
    assert taken.status_code == 202, taken.text
    wait_for(api, f"/api/v1/snapshots/{name}-s",
             lambda r: r.json()["status"].get("phase") == "Ready")
    return name, f"{name}-s"


def _run(capsys: pytest.CaptureFixture[str], before: list[str], argv: list[str]
         ) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*before, *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def admin_token(api: Api, tmp_path_factory: pytest.TempPathFactory) -> Path:
    token = tmp_path_factory.mktemp("xfer") / "admin.token"
    token.write_text(api.token("xfer-admin", "admin") + "\n")
    token.chmod(0o600)
    return token


@pytest.fixture(params=["unix", "tls"])
def where(request: pytest.FixtureRequest, api: Api, admin_token: Path) -> list[str]:
    if request.param == "unix":
        return ["--server", f"unix:{api.socket}"]
    return ["--server", api.url, "--token-file", str(admin_token),
            "--certificate-authority", str(api.certificate)]


def _snapshot_rows(api: Api) -> list[str]:
    return sorted(s["metadata"]["name"] for s in
                  api.client.get("/api/v1/snapshots").json()["items"])


def test_the_same_lines_as_on_the_state_directory(
        api: Api, where: list[str], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    _, snap = _ready_snapshot(api)
    direct = ["--state-dir", str(api.state)]
    sha = re.compile(r"sha256 [0-9a-f]{64}")
    figures: dict[str, str] = {}
    for how, options in (("direct", direct), ("remote", where)):
        archive = tmp_path / f"{how}.tar"
        code, out, err = _run(capsys, options, ["snapshot", "export", snap, "-o", str(archive)])
        assert (code, err) == (0, ""), err
        assert re.sub(r"\(\d+ entries", "(N entries", sha.sub("sha256 X", out)).replace(
            str(archive), "FILE") == (
            f"snapshot/{snap} exported to FILE (N entries, 0 bytes, sha256 X)\n"), out
        figures[how] = sha.search(out).group(0)  # type: ignore[union-attr]
        with tarfile.open(archive) as tar:  # a whole archive: header first, trailer last
            names = tar.getnames()
        assert names[0] == "devcell-snapshot.json" and names[-1] == \
            "devcell-snapshot.sha256.json"
        code, out, err = _run(capsys, options, ["snapshot", "import", str(archive), "--name",
                                                f"{snap}-{how}"])
        assert (code, err) == (0, ""), err
        assert out == (f"snapshot/{snap}-{how} imported (0 files, 0 bytes, backend fake, "
                       f"{figures[how]})\n"), out
    imported = api.client.get(f"/api/v1/snapshots/{snap}-remote").json()
    assert imported["status"]["origin"]["archive"] == str(tmp_path / "remote.tar")
    ops = api.client.get("/api/v1/operations").json()["items"]
    assert {o["action"] for o in ops if o["object_name"] == snap} >= {"export"}
    # the refusals and errors: the same words and exit codes
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"\0" * 512 + b"definitely not a snapshot archive" * 100)
    good = tmp_path / "direct.tar"
    for argv in (["snapshot", "export", f"nope-{snap}", "-o", str(tmp_path / "x.tar")],
                 ["snapshot", "export", snap, "-o", str(tmp_path)],
                 ["snapshot", "import", str(bad)],
                 ["snapshot", "import", str(tmp_path / "missing.tar")],
                 ["snapshot", "import", str(good), "--name", f"{snap}-direct"],
                 ["snapshot", "import", str(good), "--name", "Bad_Name"],
                 ["snapshot", "import", str(good)],  # the archive's own name: taken
                 # push and pull: by the server (an admin's), refused before any registry
                 ["snapshot", "push", snap, "not a reference!"],
                 ["snapshot", "pull", "not a reference!"],
                 ["snapshot", "pull", "localhost:1/a@sha256:x"]):
        rows = _snapshot_rows(api)
        here, there = _run(capsys, direct, argv), _run(capsys, where, argv)
        assert here == there, (argv, here, there)
        assert here[0] != 0 and here[1] == "" and "Traceback" not in here[2]
        assert _snapshot_rows(api) == rows
    assert not (tmp_path / "x.tar").exists()
    assert not list((api.state / "api-imports").glob("*"))


def test_standard_output_piped_full_or_closed_as_on_the_state_directory(
        api: Api, tmp_path: Path) -> None:
    """`snapshot export -o -` as a user runs it: piped (the archive on stdout, the line on
    stderr), into /dev/full, with stdout closed: the same words and exit codes directly and
    through the server, one line, never a traceback."""
    import io
    import os
    import shlex
    import subprocess
    import sys

    from tests.conftest import REPO

    _, snap = _ready_snapshot(api)
    env = dict(os.environ, DEVCELL_CONTEXTS=str(tmp_path / "none.json"))
    seen = []
    for how in (["--state-dir", str(api.state)], ["--server", f"unix:{api.socket}"]):
        argv = [sys.executable, "-m", "devcell", *how, "snapshot", "export", snap, "-o", "-"]
        piped = subprocess.run(argv, capture_output=True, env=env, cwd=REPO, timeout=60)
        assert piped.returncode == 0, piped.stderr
        with tarfile.open(fileobj=io.BytesIO(piped.stdout)) as tar:
            assert tar.getnames()[0] == "devcell-snapshot.json"
        said = re.sub(rb"sha256 [0-9a-f]{64}", b"sha256 X", piped.stderr)
        with open("/dev/full", "wb") as full:
            filled = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, env=env,
                                    cwd=REPO, timeout=60)
        closed = subprocess.run(["sh", "-c", shlex.join(argv) + " >&-"], capture_output=True,
                                env=env, cwd=REPO, timeout=60)
        seen.append((said, filled.returncode, filled.stderr, closed.returncode, closed.stderr))
    assert seen[0] == seen[1], seen
    said, full_code, full_err, _, closed_err = seen[0]
    assert said == f"snapshot/{snap} exported to standard output (".encode() + \
        said.split(b"(", 1)[1] and b"sha256 X" in said
    assert full_code == 1 and full_err.count(b"\n") == 1 and b"Traceback" not in full_err
    assert b"Traceback" not in closed_err


def test_an_export_streams_the_archive_and_names_its_operation(api: Api) -> None:
    _, snap = _ready_snapshot(api)
    with api.client.stream("GET", f"/api/v1/snapshots/{snap}/archive") as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/x-tar"
        assert "content-length" not in answer.headers  # streamed, never held whole
        op = answer.headers["devcell-operation"]
        body = b"".join(answer.iter_bytes())
    done = api.client.get(f"/api/v1/operations/{op}").json()
    assert done["action"] == "export" and done["status"] == "Succeeded", done
    outputs = done["steps"][0]["outputs"]
    assert outputs["file"] == "-" and outputs["entries"] >= 0
    imported = api.client.post(f"/api/v1/snapshots/import?name={snap}-back", content=body,
                               headers=TAR)
    assert imported.status_code == 201, imported.text
    assert imported.json()["sha256"] == outputs["sha256"]


def _developers(api: Api) -> tuple[str, str]:
    return api.token(f"xd-{uuid.uuid4().hex[:6]}", "developer"), \
        api.token(f"xv-{uuid.uuid4().hex[:6]}", "viewer")


def test_refusals_record_nothing(api: Api) -> None:
    developer, viewer = _developers(api)
    _, theirs = _ready_snapshot(api)  # the admin's
    _, own = _ready_snapshot(api, owner_token=developer)
    body = api.client.get(f"/api/v1/snapshots/{own}/archive").content
    before = _snapshot_rows(api)
    with api.tls_client(viewer) as c:
        doc = assert_problem(c.get(f"/api/v1/snapshots/{own}/archive"), 403)
        assert "refused by rule viewer-read-only" in doc["detail"]
        doc = assert_problem(c.post("/api/v1/snapshots/import?name=v-in", content=body,
                                    headers=TAR), 403)
        assert "refused by rule viewer-read-only" in doc["detail"]
    with api.tls_client(developer) as c:
        doc = assert_problem(c.get(f"/api/v1/snapshots/{theirs}/archive"), 403)
        assert "may not export Snapshot" in doc["detail"]
        assert "refused by rule developer-not-own" in doc["detail"]
        assert c.get(f"/api/v1/snapshots/{own}/archive").status_code == 200
        assert_problem(c.post("/api/v1/snapshots/import", content=body,
                              headers={"Content-Type": "text/plain"}), 415)
    assert _snapshot_rows(api) == before
    assert not list((api.state / "api-imports").glob("*"))


def _chunks(total: int) -> Iterator[bytes]:
    piece = b"\0" * (64 << 10)
    for _ in range(total // len(piece) + 1):
        yield piece


def test_an_archive_over_the_bound_is_413_and_nothing_is_kept(api: Api) -> None:
    before = _snapshot_rows(api)
    import json
    import socket

    with socket.socket(socket.AF_UNIX) as raw:  # a length over the bound: refused unread
        raw.settimeout(30)
        raw.connect(str(api.socket))
        raw.sendall(b"POST /api/v1/snapshots/import HTTP/1.1\r\nHost: devcell\r\n"
                    b"Content-Type: application/x-tar\r\nContent-Length: "
                    + str(ARCHIVE_BYTES + 1).encode() + b"\r\n\r\n" + b"\0" * 512)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            piece = raw.recv(65536)
            if not piece:
                break
            answer += piece
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), answer
    assert f"at most {ARCHIVE_BYTES} bytes" in json.loads(body)["detail"]
    try:  # sent without a length: refused once it grew past the bound
        grown = api.client.post("/api/v1/snapshots/import", content=_chunks(ARCHIVE_BYTES),
                                headers=TAR)
    except httpx.TransportError:  # the server may close before the body ended: no answer
        grown = None  # to read, and what follows (nothing recorded or spooled) still holds
    if grown is not None:
        assert_problem(grown, 413)
    assert _snapshot_rows(api) == before
    assert not list((api.state / "api-imports").glob("*"))


def test_a_hostile_archive_is_refused_with_the_local_words(api: Api, tmp_path: Path) -> None:
    """A member that climbs out of its tree: refused as `snapshot import` refuses it, 422
    archive-refused, nothing recorded, nothing spooled left."""
    import io

    _, snap = _ready_snapshot(api)
    good = api.client.get(f"/api/v1/snapshots/{snap}/archive").content
    with tarfile.open(fileobj=io.BytesIO(good)) as tar:
        header = tar.extractfile("devcell-snapshot.json").read()  # type: ignore[union-attr]
    hostile = io.BytesIO()
    with tarfile.open(fileobj=hostile, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("devcell-snapshot.json", header), ("workspace/../../etc/x", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "hostile.tar").write_bytes(hostile.getvalue())
    local = api.cli("snapshot", "import", str(tmp_path / "hostile.tar"), "--name", "h-local")
    assert local.returncode == 1 and local.stderr.startswith("error: archive refused"), \
        local.stderr
    before = _snapshot_rows(api)
    answer = api.client.post("/api/v1/snapshots/import?name=h-remote", content=hostile.getvalue(),
                             headers=TAR)
    doc = assert_problem(answer, 422)
    assert doc["type"].endswith("/archive-refused")
    assert f"error: {doc['detail']}\n" == local.stderr
    assert _snapshot_rows(api) == before
    assert not list((api.state / "api-imports").glob("*"))


def test_a_head_exports_nothing_and_an_abandoned_spool_is_removed(api: Api) -> None:
    """HEAD answers what a GET would, recording no export; a spooled file a daemon that died
    mid-import left (not written for hours) is removed by the next import."""
    import os

    _, snap = _ready_snapshot(api)
    head = api.client.head(f"/api/v1/snapshots/{snap}/archive")
    assert head.status_code == 200 and head.headers["content-type"] == "application/x-tar"
    assert api.client.head(f"/api/v1/snapshots/nope-{snap}/archive").status_code == 404
    assert not [o for o in api.client.get("/api/v1/operations").json()["items"]
                if o["object_name"] == snap and o["action"] == "export"]
    folder = api.state / "api-imports"
    folder.mkdir(mode=0o700, exist_ok=True)
    left = folder / ".import-0000000000000000.tar"
    left.write_bytes(b"half an archive")
    os.utime(left, (1, 1))
    body = api.client.get(f"/api/v1/snapshots/{snap}/archive").content
    done = api.client.post(f"/api/v1/snapshots/import?name={snap}-again", content=body,
                           headers=TAR)
    assert done.status_code == 201, done.text
    assert not left.exists() and not list(folder.glob("*"))


def test_one_transfer_at_once_for_a_user_who_is_not_an_admin(api: Api) -> None:
    """A developer's import still arriving holds their one transfer slot: their next is a 503
    naming the bound, an admin's is served; once it ended, theirs are served again."""
    import socket
    import ssl
    import urllib.parse

    developer, _ = _developers(api)
    where = urllib.parse.urlsplit(api.url)
    trusted = ssl.create_default_context(cafile=str(api.certificate))
    raw = trusted.wrap_socket(socket.create_connection((where.hostname, where.port), 30),
                              server_hostname=where.hostname)
    piece = b"200\r\n" + b"\0" * 512 + b"\r\n"
    with raw:
        raw.sendall(b"POST /api/v1/snapshots/import HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Authorization: Bearer " + developer.encode() + b"\r\nContent-Type: "
                    b"application/x-tar\r\nTransfer-Encoding: chunked\r\n\r\n" + piece)
        refused = None
        with api.tls_client(developer) as c:
            for _ in range(100):
                answer = c.post("/api/v1/snapshots/import", content=b"x", headers=TAR)
                raw.sendall(piece)  # the first goes on arriving
                if answer.status_code == 503:
                    refused = answer
                    break
                assert answer.status_code == 422, answer.text  # before the first took it
        assert refused is not None
        doc = assert_problem(refused, 503)
        assert doc["type"].endswith("/too-many-transfers"), doc
        assert "the most one user may" in doc["detail"]
        admin = api.client.post("/api/v1/snapshots/import", content=b"x", headers=TAR)
        assert_problem(admin, 422)
        raw.sendall(b"0\r\n\r\n")  # the end: refused as an archive, its slot given back
        answer = b""
        while b"\r\n\r\n" not in answer:
            got = raw.recv(65536)
            if not got:
                break
            answer += got
        assert answer.startswith(b"HTTP/1.1 422 "), answer
    with api.tls_client(developer) as c:
        assert_problem(c.post("/api/v1/snapshots/import", content=b"x", headers=TAR), 422)


def test_a_name_taken_is_refused_before_the_archive_is_received(api: Api) -> None:
    """`--name` of a snapshot recorded: the 409 comes from the request's head alone (a
    client would otherwise send gigabytes to learn it), in the import's words."""
    import json
    import socket

    _, snap = _ready_snapshot(api)
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(30)
        raw.connect(str(api.socket))
        raw.sendall(f"POST /api/v1/snapshots/import?name={snap} HTTP/1.1\r\nHost: devcell\r\n"
                    f"Content-Type: application/x-tar\r\nContent-Length: {1 << 30}\r\n\r\n"
                    .encode())
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            piece = raw.recv(65536)
            if not piece:
                break
            answer += piece
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 409 "), answer
    assert json.loads(body)["detail"] == (f'snapshot "{snap}" already exists; import under '
                                          "another name with --name")


def test_an_imported_snapshot_is_its_importers(api: Api) -> None:
    """A developer who imports an archive owns the snapshot (its recorded owner: it has no
    cell here): they fork from, export and delete it; another developer is refused
    (developer-not-own) and changes nothing."""
    import json

    developer, _ = _developers(api)
    other = api.token(f"xo-{uuid.uuid4().hex[:6]}", "developer")
    _, snap = _ready_snapshot(api)  # the admin's
    body = api.client.get(f"/api/v1/snapshots/{snap}/archive").content
    mine, fork = f"{snap}-mine", f"{snap}-fork"
    forked = cell(fork) + f"  workspace: {{from: {{snapshot: {mine}}}}}\n"
    yaml = {"Content-Type": "application/yaml"}
    with api.tls_client(developer) as c:
        made = c.post(f"/api/v1/snapshots/import?name={mine}", content=body, headers=TAR)
        assert made.status_code == 201, made.text
    before = (_snapshot_rows(api), json.dumps(api.client.get(f"/api/v1/snapshots/{mine}")
                                              .json(), sort_keys=True))
    with api.tls_client(other) as c:
        for answer in (c.get(f"/api/v1/snapshots/{mine}/archive"),
                       c.post("/api/v1/apply", content=forked, headers=yaml),
                       c.delete(f"/api/v1/snapshots/{mine}")):
            doc = assert_problem(answer, 403)
            assert "refused by rule developer-not-own" in doc["detail"], doc
    assert (_snapshot_rows(api), json.dumps(api.client.get(f"/api/v1/snapshots/{mine}")
                                            .json(), sort_keys=True)) == before
    assert api.client.get(f"/api/v1/cells/{fork}").status_code == 404
    with api.tls_client(developer) as c:
        assert c.get(f"/api/v1/snapshots/{mine}/archive").status_code == 200
        done = c.post("/api/v1/apply", content=forked, headers=yaml)
        assert done.status_code == 200, done.text
        wait_for(api, f"/api/v1/cells/{fork}",
                 lambda r: r.json()["status"]["phase"] == "Running")
        gone = c.delete(f"/api/v1/cells/{fork}")
        assert gone.status_code == 200, gone.text
        gone = c.delete(f"/api/v1/snapshots/{mine}")
        assert gone.status_code == 200, gone.text
    wait_for(api, f"/api/v1/snapshots/{mine}", lambda r: r.status_code == 404)


def test_a_snapshot_is_changed_by_its_owner_not_by_whoever_owns_its_cells_name(
        api: Api) -> None:
    """A Snapshot manifest over a recorded snapshot is judged by that snapshot's owner,
    not by the cell its spec.cell names: an imported snapshot names its archive's cell,
    and a deleted cell's name can be made again by anyone. Another developer who made a
    cell of that name set a ttl of 1s on the importer's snapshot (retention then deleted
    it) or relabelled it (attack46)."""
    import json

    developer, _ = _developers(api)
    other = api.token(f"xo-{uuid.uuid4().hex[:6]}", "developer")
    source, snap = _ready_snapshot(api)  # the admin's
    body = api.client.get(f"/api/v1/snapshots/{snap}/archive").content
    mine = f"{snap}-mine"
    yaml = {"Content-Type": "application/yaml"}
    with api.tls_client(developer) as c:
        made = c.post(f"/api/v1/snapshots/import?name={mine}", content=body, headers=TAR)
        assert made.status_code == 201, made.text
    assert api.client.delete(f"/api/v1/cells/{source}").status_code == 200
    wait_for(api, f"/api/v1/cells/{source}", lambda r: r.status_code == 404)
    with api.tls_client(other) as c:  # the cell's name is the other developer's now
        assert c.post("/api/v1/apply", content=cell(source), headers=yaml).status_code == 200
    before = (_snapshot_rows(api), [json.dumps(api.client.get(f"/api/v1/snapshots/{s}")
                                               .json(), sort_keys=True) for s in (mine, snap)])
    with api.tls_client(other) as c:
        for name in (mine, snap):
            for extra in ("  ttl: 1s\n", ""):
                changed = (f"apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: "
                           f"{{name: {name}, labels: {{taken: over}}}}\nspec:\n"
                           f"  cell: {source}\n{extra}")
                doc = assert_problem(c.post("/api/v1/apply", content=changed, headers=yaml),
                                     403)
                assert "refused by rule developer-not-own" in doc["detail"], doc
    assert (_snapshot_rows(api), [json.dumps(api.client.get(f"/api/v1/snapshots/{s}")
                                             .json(), sort_keys=True)
                                  for s in (mine, snap)]) == before
    with api.tls_client(developer) as c:  # the importer still changes theirs
        relabelled = (f"apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: "
                      f"{{name: {mine}, labels: {{kept: mine}}}}\nspec:\n  cell: {source}\n")
        done = c.post("/api/v1/apply", content=relabelled, headers=yaml)
    assert done.status_code == 200, done.text
    assert api.client.delete(f"/api/v1/cells/{source}").status_code == 200


def test_a_spool_is_refused_once_the_disk_keeps_less_than_its_margin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound a spool gets is the free space when it was opened; four uploads at once
    (or any other writer) spend the same disk, so each piece is checked as it is written: a
    413 once the disk would keep under SPOOL_MARGIN (attack46 F2: two developers' uploads
    each took the whole free space less the margin, filling the disk)."""
    import os
    import shutil

    from devcell.server import transfer_routes as tr
    from devcell.server.problems import HttpProblem

    free = [tr.SPOOL_MARGIN + 10]
    real = shutil.disk_usage
    monkeypatch.setattr(tr.shutil, "disk_usage",
                        lambda p: real(p)._replace(free=free[0]))
    spooled = tmp_path / "spool.tar"
    fd = os.open(spooled, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        tr.write_spooled(fd, b"a" * 4, tmp_path, 4, tr.MAX_ARCHIVE_BYTES)
        free[0] = tr.SPOOL_MARGIN - 1  # another upload took the rest meanwhile
        with pytest.raises(HttpProblem) as refused:
            tr.write_spooled(fd, b"b" * 4, tmp_path, 8, tr.MAX_ARCHIVE_BYTES)
    finally:
        os.close(fd)
    assert refused.value.status == 413
    assert "has room for 4 bytes of archive (it keeps 256 MiB free)" in str(refused.value), \
        str(refused.value)
