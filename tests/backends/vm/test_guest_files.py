"""DevCell's guest files added to a hostile unpacked image (devcell.backends.vm.guest_files).

The property: whatever an image plants at the paths DevCell writes or at their parents (a link
to a host file or directory, absolute or climbing out with `..`, a dangling link, a file, a
FIFO, a directory holding links), the host outside the image's tree is left exactly as it was,
and the guest files are DevCell's own: regular files with DevCell's bytes, real directories.
No machine and no engine: the tree is built here, as `tar -x` would leave it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcell.backends.vm import guest_files

GUEST = ".devcell-guest"
INIT = "#!/.devcell-guest/busybox sh\necho devcell init\n"
CLOCK = b"\x7fELF clock program"
AGENT_NAMES = ("qemu-ga", "libglib-2.0.so.0")
WRITTEN = [GUEST, f"{GUEST}/busybox", f"{GUEST}/bin", f"{GUEST}/init", f"{GUEST}/clock",
           f"{GUEST}/ga", *(f"{GUEST}/bin/{a}" for a in guest_files.APPLETS[:3]),
           *(f"{GUEST}/ga/{n}" for n in AGENT_NAMES), *guest_files.MOUNT_POINTS]
"""The paths DevCell writes (and, being nested, the parents of the deeper ones)."""
PLANTS = ("link-host-file", "link-host-dir", "link-climbing", "dangling", "file", "fifo",
          "dir-with-links")


def _snapshot(top: Path) -> dict[str, tuple[int, bytes | str | None]]:
    """Every entry under `top`: its type and mode, and a file's bytes or a link's target."""
    found: dict[str, tuple[int, bytes | str | None]] = {}
    for directory, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(directory) / name
            st_ = path.lstat()
            body: bytes | str | None = None
            if stat.S_ISLNK(st_.st_mode):
                body = os.readlink(path)
            elif stat.S_ISREG(st_.st_mode):
                body = path.read_bytes()
            found[str(path.relative_to(top))] = (st_.st_mode, body)
    return found


def _plant(root: Path, rel: str, kind: str, host: Path) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    depth = rel.count("/") + 1
    if kind == "link-host-file":
        path.symlink_to(host / "victim")
    elif kind == "link-host-dir":
        path.symlink_to(host / "dir")
    elif kind == "link-climbing":
        path.symlink_to("../" * (depth + 1) + "host/dir")
    elif kind == "dangling":
        path.symlink_to(host / "missing" / "nowhere")
    elif kind == "file":
        path.write_text("the image's own file\n")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
        (path / "inner").symlink_to(host / "victim")
        (path / "deeper").mkdir()
        (path / "deeper" / "x").symlink_to(host / "dir")


def _world(base: Path) -> tuple[Path, Path, Path, list[Path]]:
    """The host (a file and a directory an attacker aims at), the image's tree, DevCell's sources."""
    host = base / "host"
    (host / "dir").mkdir(parents=True)
    (host / "victim").write_text("the host's own file\n")
    root = base / "work" / "tree"  # two levels down, so a climbing link reaches base/host
    root.mkdir(parents=True)
    sources = base / "sources"
    sources.mkdir()
    (sources / "busybox").write_bytes(b"busybox binary")
    agents = []
    for name in AGENT_NAMES:
        (sources / name).write_bytes(name.encode())
        agents.append(sources / name)
    return host, root, sources / "busybox", agents


def _check_guest(root: Path, busybox: Path, agents: list[Path]) -> None:
    guest = root / GUEST
    assert stat.S_ISDIR(guest.lstat().st_mode)
    for name, want in (("init", INIT.encode()), ("clock", CLOCK),
                       ("busybox", busybox.read_bytes())):
        assert stat.S_ISREG((guest / name).lstat().st_mode) and (guest / name).read_bytes() == want
    assert stat.S_IMODE((guest / "init").lstat().st_mode) == 0o755
    for agent in agents:
        copied = guest / "ga" / agent.name
        assert stat.S_ISREG(copied.lstat().st_mode) and copied.read_bytes() == agent.read_bytes()
    for applet in guest_files.APPLETS:
        assert os.readlink(guest / "bin" / applet) == "../busybox"
    assert sorted(p.name for p in (guest / "bin").iterdir()) == sorted(guest_files.APPLETS)
    for mount_point in guest_files.MOUNT_POINTS:
        assert stat.S_ISDIR((root / mount_point).lstat().st_mode), mount_point


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plants=st.dictionaries(st.sampled_from(WRITTEN), st.sampled_from(PLANTS), min_size=1,
                              max_size=6))
def test_nothing_an_image_plants_is_followed_out_of_its_tree(plants: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        host, root, busybox, agents = _world(base)
        for rel in sorted(plants, key=lambda r: r.count("/")):
            parent = (root / rel).parent
            if parent != root and not (parent.is_dir() and not parent.is_symlink()):
                continue  # a parent planted as something else: this one cannot exist
            _plant(root, rel, plants[rel], host)
        before = _snapshot(host), _snapshot(base / "sources")
        guest_files.add(root, GUEST, busybox=busybox, agent_files=agents, init=INIT, clock=CLOCK)
        assert (_snapshot(host), _snapshot(base / "sources")) == before
        assert sorted(p.name for p in base.iterdir()) == ["host", "sources", "work"]
        assert [p.name for p in (base / "work").iterdir()] == ["tree"]
        _check_guest(root, busybox, agents)


def test_an_image_directory_at_a_mount_point_is_kept_with_what_it_holds(tmp_path: Path) -> None:
    host, root, busybox, agents = _world(tmp_path)
    (root / "tmp").mkdir()
    (root / "tmp" / "image-file").write_text("kept\n")
    guest_files.add(root, GUEST, busybox=busybox, agent_files=agents, init=INIT, clock=CLOCK)
    assert (root / "tmp" / "image-file").read_text() == "kept\n"
    _check_guest(root, busybox, agents)


def test_the_guest_directory_is_one_name(tmp_path: Path) -> None:
    _, root, busybox, agents = _world(tmp_path)
    for bad in ("a/b", "..", ".", ""):
        with pytest.raises(ValueError):
            guest_files.add(root, bad, busybox=busybox, agent_files=agents, init=INIT,
                            clock=CLOCK)


def _chain(top: Path, depth: int) -> None:
    """`top/d/d/.../d/f`, `depth` directories deep, made by descriptors (no path grows)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    os.close(fd)


def test_a_tree_deeper_than_the_bound_is_refused_before_mkfs_and_removed(tmp_path: Path) -> None:
    from devcell.backends.host import removal
    from devcell.backends.vm import image as vm_image
    from devcell.errors import BackendRefused

    tree = tmp_path / "tree"
    tree.mkdir()
    _chain(tree, 1100)  # Python's own walkers and rmtree raise RecursionError here
    with pytest.raises(BackendRefused, match="more than 256 levels deep"):
        vm_image.tree_bytes(tree, "image devcell-test/deep:1")
    with pytest.raises(BackendRefused, match="more than 256 levels deep"):
        vm_image.mkfs(tree, tmp_path / "disk.ext4", 64 << 20, "devcell-root")
    assert not (tmp_path / "disk.ext4").exists()
    removal.remove(tree)
    assert not tree.exists()


def test_a_tree_within_the_bounds_is_measured(tmp_path: Path) -> None:
    from devcell.backends.vm import image as vm_image

    tree = tmp_path / "tree"
    tree.mkdir()
    _chain(tree, 200)
    (tree / "data").write_bytes(b"x" * 8192)
    (tree / "link").symlink_to("/etc/passwd")
    assert vm_image.tree_bytes(tree, "image x") >= 8192


def test_the_root_disks_top_is_0755_whatever_the_umask(tmp_path: Path) -> None:
    """An image's export has no entry for its root, so the tree DevCell unpacks it into gives
    the guest's / its mode: made under a umask of 077 it was 0700, and the guest's users could
    not reach anything (found by attackperm)."""
    import subprocess

    from devcell.backends.vm import image as vm_image
    from devcell.backends.vm.layout import VmLayout
    from tests.backends.engine import require_engine

    require_engine()
    previous = os.umask(0o077)
    try:
        _, disk = vm_image.rootfs(VmLayout(tmp_path / "state"), "devcell/busybox:latest")
    finally:
        os.umask(previous)
    shown = subprocess.run(["debugfs", "-R", "stat /", str(disk)], capture_output=True,
                           text=True, check=True).stdout
    assert "Mode:  0755" in shown or "Mode:  00755" in shown, shown
