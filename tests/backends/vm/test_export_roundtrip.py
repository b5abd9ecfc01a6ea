"""A vm snapshot's export is byte-exact: an archive imported into a vm checkpoint (mkfs.ext4
and vm/exact_disk) and exported from it again (vm/extract) is the same archive, checksum for
checksum, over odd names, link targets, modes, owners and times; and the read costs a few
debugfs processes per level of the tree, not one per directory or link."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcell.backends.archives import format as archive_format
from devcell.backends.archives import read as archive_read
from devcell.backends.archives import write as archive_write
from devcell.backends.vm import debugfs, extract
from devcell.backends.vm.disks import DiskStore
from devcell.backends.vm.layout import VmLayout

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("debugfs", "mkfs.ext4", "qemu-img")),
    reason="e2fsprogs and qemu-utils are needed")

HEADER = archive_format.header_bytes(
    name="s", snapshot_id="snap_1", labels={}, annotations={}, cell="c", cell_id="cell_1",
    parent_snapshot_id=None, consistency="filesystem", backend="vm", taken_at=None,
    exported_at="2026-12-03T00:00:00Z", devcell_version="test", schema_version=1,
    has_tree=True)

# Names a guest (or a user) can give: newlines, quotes, spaces, a leading `#` or `-`,
# debugfs's own words, bytes that are not UTF-8.
_NAME_BYTES = st.sampled_from([b"a", b"Z", b" ", b"\n", b'"', b"'", b"\\", b"#", b"-", b"*",
                               b"\t", b"\xff", b"\xc3\xa9", b"debugfs: ", b"\r", b"="])
NAMES = st.lists(_NAME_BYTES, min_size=1, max_size=6).map(b"".join).filter(
    lambda n: n not in (b".", b"..") and len(n) <= 255)
TARGETS = st.one_of(
    st.lists(_NAME_BYTES | st.just(b"/"), min_size=1, max_size=12).map(b"".join),
    st.integers(61, 300).map(lambda n: b"x/" * (n // 2)))  # past 60 bytes: a slow link
# from ext4's first second (1901) to the archive's last (ten digits of seconds: 2286)
TIMES = st.integers(-(1 << 31) * 10**9, 10**19 - 1)
FILE_MODES = st.integers(0, 0o1777)
DIR_MODES = st.integers(0, 0o1777)
OWNERS = st.sampled_from([0, 1, 1000, 65534, 70000])


@st.composite
def trees(draw: st.DrawFn) -> list[tuple]:
    """Operations building a tree: ("dir"|"file"|"link"|"hard", parent index, ...)."""
    ops: list[tuple] = []
    dirs = 1  # index 0 is the root
    files: list[int] = []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["dir", "file", "file", "link", "hard"]))
        parent = draw(st.integers(0, dirs - 1))
        name = draw(NAMES)
        times = (draw(TIMES), draw(TIMES))
        owner = (draw(OWNERS), draw(OWNERS))
        if kind == "dir":
            ops.append(("dir", parent, name, draw(DIR_MODES), owner, times))
            dirs += 1
        elif kind == "file":
            files.append(len(ops))
            ops.append(("file", parent, name, draw(FILE_MODES), owner, times,
                        draw(st.binary(max_size=5000))))
        elif kind == "link":
            ops.append(("link", parent, name, draw(TARGETS), owner, times))
        elif files:
            ops.append(("hard", parent, name, draw(st.sampled_from(files))))
    ops.append(("root", draw(DIR_MODES), (draw(TIMES), draw(TIMES))))
    return ops


def build(root: Path, ops: list[tuple]) -> None:
    """The tree the operations describe (names that collide are dropped)."""
    root.mkdir()
    dirs = [os.fsencode(root)]
    made: dict[int, bytes] = {}
    for index, op in enumerate(ops):
        if op[0] == "root":
            continue
        path = os.path.join(dirs[op[1]], op[2])
        if os.path.lexists(path):
            if op[0] == "dir":
                dirs.append(dirs[0])  # keeps later indices valid
            continue
        if op[0] == "dir":
            os.mkdir(path)
            dirs.append(path)
            made[index] = path
        elif op[0] == "file":
            with open(path, "wb") as f:
                f.write(op[6])
            made[index] = path
        elif op[0] == "link":
            os.symlink(op[3], path)
            made[index] = path
        elif op[0] == "hard" and op[3] in made:
            os.link(made[op[3]], path)
    # modes, owners and times last, deepest first, so making entries does not move them
    for index, op in reversed(list(enumerate(ops))):
        if op[0] == "root":
            os.chmod(dirs[0], op[1])
            os.utime(dirs[0], ns=op[2])
        elif index in made:
            path = made[index]
            os.chown(path, *op[4], follow_symlinks=False)
            if op[0] != "link":
                os.chmod(path, op[3])
            os.utime(path, ns=op[5], follow_symlinks=False)


def archive_of(tree: Path) -> tuple[bytes, str]:
    out = io.BytesIO()
    written = archive_write.write(out, HEADER, tree)
    return out.getvalue(), written.sha256


def round_trip(base: Path, tree: Path) -> tuple[str, str, Path]:
    """(sha of the tree's archive, sha after import into a vm checkpoint and export, the
    store) with the exported tree released."""
    first, sha = archive_of(tree)
    store = DiskStore(VmLayout(base / "state"))
    archive = archive_read.Archive(io.BytesIO(first), archive_read.DEFAULT_LIMITS)
    store.import_checkpoint("snap_1", cell_id="cell_1", cell_name="c",
                            fill=lambda d: (archive.extract(d).files, 0))
    out = store.files_of("snap_1")
    try:
        _, again = archive_of(out)
    finally:
        store.release_files(out)
    return sha, again, base / "state"


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=trees())
def test_an_imported_archive_comes_back_out_byte_for_byte(tmp_path_factory: pytest.TempPathFactory,
                                                        ops: list[tuple]) -> None:
    base = tmp_path_factory.mktemp("trip")
    build(base / "tree", ops)
    sha, again, state = round_trip(base, base / "tree")
    assert again == sha
    checkpoint = VmLayout(state).checkpoint("snap_1")
    assert sorted(p.name for p in checkpoint.iterdir()) == ["checkpoint.json"]  # no copy kept
    shutil.rmtree(base)


def test_odd_names_and_targets_survive_the_trip_by_hand(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir(mode=0o755)
    (tree / "two\nlines").write_text("3")
    (tree / "# comment").write_text("c")
    os.symlink('tar\nget "q"', tree / "newline-link")
    os.symlink("y" * 200, tree / "slow")
    os.utime(tree / "two\nlines", ns=(1_700_000_000_123_456_789, 1_600_000_000_987_654_321))
    sha, again, _ = round_trip(tmp_path, tree)
    assert again == sha


def test_an_empty_workspace_disk_holds_no_lost_and_found(tmp_path: Path) -> None:
    store = DiskStore(VmLayout(tmp_path / "state"))
    store.create_volume(cell_id="cell_1", cell_name="c", volume_id="vol_1",
                        from_checkpoint=None, op_id=None)
    raw = tmp_path / "disk.raw"
    from devcell.backends.vm import layers as vm_layers
    vm_layers.qemu_img(["convert", "-q", "-f", "qcow2", "-O", "raw",
                        str(store.volume_disk("vol_1")), str(raw)])
    (root,) = debugfs.run(raw, ["ls -p <2>"], cwd=tmp_path)
    assert debugfs.entries(root, 2) == []


def test_two_thousand_links_cost_a_few_processes_not_two_thousand(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    for i in range(2000):
        os.symlink(f"target-{i}" + ("x" * 70 if i % 2 else ""), tree / "d" / f"l{i}")
        if i % 100 == 0:
            (tree / f"dir{i}").mkdir()
    image = tmp_path / "disk.ext4"
    from devcell.backends.vm import image as vm_image
    vm_image.mkfs(tree, image, 64 << 20, "t", exact=True)
    runs = []
    real = debugfs._read
    monkeypatch.setattr(debugfs, "_read", lambda argv, **kw: runs.append(argv) or real(argv, **kw))
    out = tmp_path / "out"
    out.mkdir()
    extract.extract(image, out, budget=1 << 30)
    assert len(os.listdir(out / "d")) == 2000
    assert os.readlink(out / "d" / "l1") == "target-1" + "x" * 70
    # the root's stat, then per level: ls, stat and dump (3 levels here)
    assert len(runs) <= 1 + 3 * 3, len(runs)


def test_a_git_source_seeds_a_new_vm_workspace_disk(tmp_path: Path) -> None:
    """The clone lands on the disk mkfs makes (no boot): its files come out of the disk."""
    import subprocess

    from devcell.backends.host.git_source import GitSource
    from devcell.backends.vm import layers as vm_layers

    work = tmp_path / "work"
    work.mkdir()
    (work / "README").write_text("from git\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", *args], cwd=work, check=True, env=env, capture_output=True)
    store = DiskStore(VmLayout(tmp_path / "state"))
    store.create_volume(cell_id="cell_1", cell_name="c", volume_id="vol_1",
                        from_checkpoint=None, op_id=None, seed=GitSource(str(work), None, 1))
    raw = tmp_path / "disk.raw"
    vm_layers.qemu_img(["convert", "-q", "-f", "qcow2", "-O", "raw",
                        str(store.volume_disk("vol_1")), str(raw)])
    out = tmp_path / "out"
    out.mkdir()
    extract.extract(raw, out, budget=1 << 30)
    assert (out / "README").read_text() == "from git\n" and (out / ".git").is_dir()


def test_a_directory_source_seeds_a_new_vm_workspace_disk(tmp_path: Path) -> None:
    """A host directory copied onto the disk mkfs makes (no boot), a link kept as a link;
    the directory itself is left as it was."""
    from devcell.backends.host.workspace_seed import DirectorySource
    from devcell.backends.vm import layers as vm_layers

    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print('hi')\n")
    (project / "to-etc").symlink_to("/etc/passwd")
    before = sorted(str(p.relative_to(project)) for p in project.rglob("*"))
    store = DiskStore(VmLayout(tmp_path / "state"))
    store.create_volume(cell_id="cell_1", cell_name="c", volume_id="vol_1",
                        from_checkpoint=None, op_id=None, seed=DirectorySource(str(project)))
    raw = tmp_path / "disk.raw"
    vm_layers.qemu_img(["convert", "-q", "-f", "qcow2", "-O", "raw",
                        str(store.volume_disk("vol_1")), str(raw)])
    out = tmp_path / "out"
    out.mkdir()
    extract.extract(raw, out, budget=1 << 30)
    assert (out / "src" / "main.py").read_text() == "print('hi')\n"
    assert os.readlink(out / "to-etc") == "/etc/passwd"
    assert sorted(str(p.relative_to(project)) for p in project.rglob("*")) == before
