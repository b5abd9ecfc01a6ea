"""Finding and reading manifest files: the walk's order and rules, reading within the limit."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devcell.errors import ManifestError
from devcell.manifests import loader

NAMES = st.sampled_from(["a.yaml", "b.yml", "c.json", "z.yaml", "A.yaml", "_x.yaml", ".h.yaml",
                         "notes.txt"])
DIRS = st.sampled_from(["", "a", "b", "a/b", "a/a", "z", ".git", "node_modules"])


@settings(max_examples=80, deadline=None)
@given(st.sets(st.tuples(DIRS, NAMES), max_size=20))
def test_walk_order_sorts_files_as_the_walk_lists_them(entries: set[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for directory, name in entries:
            (Path(tmp) / directory).mkdir(parents=True, exist_ok=True)
            (Path(tmp) / directory / name).write_text("x")
        walked = loader.walk(tmp)
        relative = [os.path.relpath(p, tmp) for p in walked]
        assert sorted(relative, key=loader.walk_order) == relative
        assert all(not any(loader.hidden(part) for part in r.split(os.sep)) for r in relative)
        assert all(loader.manifest_name(os.path.basename(r)) for r in relative)


def test_small_and_limit_sized_files_are_read_whole(tmp_path: Path) -> None:
    small, exact = tmp_path / "small.yaml", tmp_path / "exact.yaml"
    small.write_bytes(b"kind: Cell\n")
    exact.write_bytes(b"x" * 64)
    files = loader.read_sources([str(small), str(exact)], limit=64)
    assert [f.data for f in files] == [b"kind: Cell\n", b"x" * 64]


def _special(kind: str, path: Path, tmp: Path) -> None:
    """Make `path` an entry that is not a regular file (or a link to one)."""
    import socket

    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-to-fifo":
        os.mkfifo(tmp / "elsewhere")
        os.symlink(tmp / "elsewhere", path)
    elif kind == "device":
        os.symlink("/dev/zero", path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()


SPECIAL = ["fifo", "link-to-fifo", "device", "socket"]


def _within(seconds: float, fn: object) -> object:
    """Run fn in a thread; fail (not hang the suite) if it blocks."""
    import threading

    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(_call(fn)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"blocked for {seconds}s (a FIFO opened for reading waits for a writer)"
    return out[0]


def _call(fn: object) -> object:
    try:
        return fn()  # type: ignore[operator]
    except Exception as exc:  # noqa: BLE001
        return exc


@pytest.mark.parametrize("kind", SPECIAL)
def test_a_walked_entry_that_is_not_a_regular_file_is_a_problem_never_read(
        tmp_path: Path, kind: str) -> None:
    """A FIFO named x.yaml in a directory hung `devcell apply -f DIR` and the daemon's sync
    for good (open() waits for a writer, and signals do not interrupt it); a device would be
    read. Both are now a problem naming the file, for the walk and for the daemon's reads."""
    root = tmp_path / "dir"
    root.mkdir()
    (root / "good.yaml").write_text("a: 1\n")
    _special(kind, root / "x.yaml", tmp_path)
    for call in (lambda: loader.read_sources([str(root)]),
                 lambda: loader.read_sources([str(root / "x.yaml")], regular_only=True)):
        raised = _within(5, call)
        assert isinstance(raised, ManifestError), raised
        expected = loader.A_LINK if kind in ("link-to-fifo", "device") else loader.NOT_REGULAR
        assert [(p.file, p.message) for p in raised.problems] == [
            (str(root / "x.yaml"), expected)]


def test_a_link_in_a_directory_is_never_followed(tmp_path: Path) -> None:
    """A link committed to a GitOps directory read a host file and quoted it in errors
    (`apiVersion: must be ... (got "HOST-ONLY-SECRET")`): links in a directory are a problem
    naming the file, never read, for the walk and for the daemon's reads; a link given by
    name on its own is the user's choice and is read."""
    outside = tmp_path / "hostonly" / "creds.yaml"
    outside.parent.mkdir()
    outside.write_text("apiVersion: HOST-ONLY-SECRET\nkind: Cell\n")
    root = tmp_path / "dir"
    root.mkdir()
    (root / "good.yaml").write_text("a: 1\n")
    os.symlink(outside, root / "x.yaml")
    for call in (lambda: loader.read_sources([str(root)]),
                 lambda: loader.read_sources([str(root / "x.yaml")], regular_only=True)):
        with pytest.raises(ManifestError) as raised:
            call()
        assert [(p.file, p.message) for p in raised.value.problems] == [
            (str(root / "x.yaml"), loader.A_LINK)]
        assert "HOST-ONLY" not in str(raised.value)
    named = loader.read_sources([str(root / "x.yaml")])
    assert named[0].data == outside.read_bytes()


def test_a_pipe_given_by_name_is_still_read(tmp_path: Path) -> None:
    """`devcell apply -f <(cmd)` names a pipe: read it, as before."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as fh:
            fh.write("a: 1\n")

    threading.Thread(target=write, daemon=True).start()
    files = _within(5, lambda: loader.read_sources([str(fifo)]))
    assert [f.data for f in files] == [b"a: 1\n"]  # type: ignore[union-attr]


def test_a_fifo_whose_writer_comes_later_is_waited_for(tmp_path: Path) -> None:
    """A named FIFO opened before any program opened it for writing read as empty at once
    ("no objects": attack43, H): it is waited on, a bounded time, for its writer."""
    import threading
    import time

    fifo = tmp_path / "later"
    os.mkfifo(fifo)

    def write() -> None:
        time.sleep(0.5)  # the reader is (most likely) waiting by now: the case of the bug
        with open(fifo, "w") as fh:
            fh.write("a: 1\n")

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    files = _within(loader.FIFO_WAIT_S + 5, lambda: loader.read_sources([str(fifo)]))
    assert [f.data for f in files] == [b"a: 1\n"]  # type: ignore[union-attr]
    writer.join()


def test_a_fifo_no_program_writes_is_refused_saying_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the wait, a FIFO nobody opened for writing is named as such, not as a file that
    holds only comments."""
    monkeypatch.setattr(loader, "FIFO_WAIT_S", 0.0)
    fifo = tmp_path / "nobody"
    os.mkfifo(fifo)
    with pytest.raises(ManifestError, match="a FIFO no program opened for writing within 0 s"):
        loader.read_sources([str(fifo)])


def test_the_limit_bounds_each_document_not_the_file(tmp_path: Path) -> None:
    many = tmp_path / "many.yaml"
    many.write_bytes(b"".join(b"---\nkind: Cell\nn: %03d\n" % i for i in range(100)))
    [read] = loader.read_sources([str(many)], limit=64)
    assert read.data == many.read_bytes() and len(read.data) > 64
    big = tmp_path / "big.yaml"
    big.write_bytes(b"---\nkind: Cell\n...\n" + b"a: " + b"x" * 100 + b"\n---\nb: 1\n")
    with pytest.raises(ManifestError) as refused:
        loader.read_sources([str(big)], limit=64)
    [problem] = refused.value.problems
    assert problem.line == 4  # the document after the `...` end marker
    assert "larger than the limit of 64 bytes per document" in problem.message


@pytest.mark.parametrize(("count", "brk"), [
    (500_000, b"\n"), (262_000, b"\n"),  # 2 MB streamed; under 1 MiB read at once
    (100_000, b"\r"), (50_000, "\u2028".encode())])  # libyaml's other line breaks
def test_a_file_is_bounded_in_documents_as_well_as_bytes(tmp_path: Path, count: int,
                                                          brk: bytes) -> None:
    """500,000 empty documents in 2 MB took apply 9 s and 540 MB before this bound; CR-only
    breaks (one line to a `\n` split) cost the same until they were counted too."""
    path = tmp_path / "empty.yaml"
    path.write_bytes((b"---" + brk) * count + b"\n")
    with pytest.raises(ManifestError) as refused:
        loader.read_sources([str(path)])
    [problem] = refused.value.problems
    if brk == b"\n":
        assert problem.line == loader.MAX_DOCUMENTS + 1
    assert f"more than {loader.MAX_DOCUMENTS} documents in one file" in problem.message


def test_a_file_of_the_most_documents_is_read(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_bytes(b"---\nkind: Cell\n" * loader.MAX_DOCUMENTS)
    [read] = loader.read_sources([str(path)])
    assert read.data == path.read_bytes()


def test_a_json_file_is_one_document(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_bytes(b"[\n---,\n" + b"1," * 40 + b"1]\n")  # `---` means nothing in JSON
    with pytest.raises(ManifestError, match="one JSON document"):
        loader.read_sources([str(path)], limit=64)
