"""Images offline for the vm backend: an OCI image becomes a root disk, the host's kernel boots it.

A cell's `image` is the same local image the container backend runs. Its root filesystem is
exported from the engine (the container backend's `export_image`: only that module speaks to
Docker), unpacked, given DevCell's guest files (a static busybox, qemu-guest-agent with the
libraries it links, the init: vm/guest.py), and written into an ext4 file by `mkfs.ext4 -d`,
once per image id: `<state>/vm/images/<id>/rootfs.ext4`, read-only, shared by every cell as
the backing file of its qcow2 overlay. The kernel is Debian's cloud kernel from /boot
(linux-image-cloud-amd64); the initrd is built here from busybox and the kernel's virtio
modules. Nothing is downloaded: what is missing is named with the apt-get line that installs it.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from devcell.backends.container import base_image
from devcell.backends.host import children, removal, temporaries, treewalk
from devcell.backends.vm import clock as vm_clock
from devcell.backends.vm import exact_disk, guest_files, streams_build
from devcell.backends.vm import guest as vm_guest
from devcell.backends.vm.layout import VmLayout
from devcell.errors import BackendError, BackendRefused, BackendUnavailable
from devcell.log import logger

KERNEL_GLOB = "vmlinuz-*-cloud-amd64"
AGENT = Path("/usr/sbin/qemu-ga")
SFTP_SERVER = Path("/usr/lib/openssh/sftp-server")
"""OpenSSH's sftp-server, copied into each guest: sftp to a vm cell runs it there."""
INSTALL = ("apt-get install -y qemu-system-x86 qemu-utils linux-image-cloud-amd64 "
           "busybox-static qemu-guest-agent openssh-sftp-server gcc libc6-dev")
_IMAGE_ID = re.compile(r"(?:sha256:)?([0-9a-f]{64})")


@dataclass(frozen=True)
class Kernel:
    release: str
    path: Path
    modules: Path


def find_kernel() -> Kernel:
    """The newest Debian cloud kernel in /boot (or $DEVCELL_VM_KERNEL) with its modules."""
    forced = os.environ.get("DEVCELL_VM_KERNEL")
    candidates = [Path(forced)] if forced else sorted(Path("/boot").glob(KERNEL_GLOB))
    for path in reversed(candidates):
        release = path.name.removeprefix("vmlinuz-")
        modules = Path("/lib/modules") / release
        if path.is_file() and all((modules / m).is_file() for m in vm_guest.MODULES):
            return Kernel(release, path, modules)
    raise BackendUnavailable(f"no kernel for vm cells (/boot/{KERNEL_GLOB} with its virtio "
                             f"modules); install it: {INSTALL}")


def qemu_ready() -> None:
    """BackendUnavailable (with the apt-get line) unless QEMU, qemu-img and the agent are here."""
    for tool in ("qemu-system-x86_64", "qemu-img", "mkfs.ext4"):
        if shutil.which(tool) is None:
            raise BackendUnavailable(f"{tool} is not installed; install it: {INSTALL}")
    if not AGENT.is_file():
        raise BackendUnavailable(f"qemu-guest-agent is not installed; install it: {INSTALL}")


def _mkdir_private(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def _cpio_newc(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A newc cpio archive (what the kernel unpacks as an initramfs) of (name, mode, data)."""
    out = bytearray()
    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
        raw = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(raw), 0]
        out += b"070701" + b"".join(b"%08X" % f for f in fields) + raw
        out += b"\0" * (-(110 + len(raw)) % 4) + data + b"\0" * (-len(data) % 4)
    return bytes(out)


def initrd(layout: VmLayout, kernel: Kernel) -> Path:
    """`<state>/vm/boot/<release>/initrd.cpio`, built once."""
    final = layout.boot / f"{kernel.release}-g{vm_guest.VERSION}" / "initrd.cpio"
    if final.is_file():
        return final
    _mkdir_private(final.parent)
    busybox = base_image.find_busybox()
    entries: list[tuple[str, int, bytes]] = [
        (d, stat.S_IFDIR | 0o755, b"") for d in ("bin", "dev", "proc", "sys", "newroot",
                                                  "lib", "lib/modules")]
    entries.append(("bin/busybox", stat.S_IFREG | 0o755, busybox.read_bytes()))
    entries.append(("init", stat.S_IFREG | 0o755, vm_guest.INITRD_INIT.encode()))
    for module in vm_guest.MODULES:
        entries.append((f"lib/modules/{Path(module).name}", stat.S_IFREG | 0o644,
                        (kernel.modules / module).read_bytes()))
    tmp = final.with_name(f".tmp-{os.getpid()}-{final.name}")
    tmp.write_bytes(_cpio_newc(entries))
    os.replace(tmp, final)
    return final


def _agent_files() -> list[Path]:
    """qemu-ga and every library it links (read from ldd), for /.devcell-guest/ga."""
    return _with_libraries(AGENT, "qemu-guest-agent")


def _with_libraries(program: Path, package: str) -> list[Path]:
    """`program` and every library it links (read from ldd)."""
    if not program.is_file():
        raise BackendUnavailable(f"{package} is not installed; install it: {INSTALL}")
    listed = children.run(["ldd", str(program)])
    if listed.returncode != 0:
        raise BackendError(f"cannot list the libraries of {program}: {listed.stderr.strip()}")
    libs = [Path(p) for p in re.findall(r"(/\S+)", listed.stdout)]
    return [program, *libs]


def _add_guest_files(root: Path, layout: VmLayout) -> None:
    guest_files.add(root, vm_guest.GUEST_DIR, busybox=base_image.find_busybox(),
                    agent_files=_agent_files(), init=vm_guest.ROOT_INIT, clock=vm_clock.program(),
                    streams=streams_build.helper(layout.root / "helpers"),
                    sftp_files=_with_libraries(SFTP_SERVER, "openssh-sftp-server"))


MAX_TREE_DEPTH = 256
"""Directory levels a tree may have before it reaches `mkfs.ext4 -d`, which aborts with heap
corruption on a chain about 1,100 deep (Linux distributions stay under 40)."""
MAX_TREE_ENTRIES = 2_000_000
"""Entries (files, links, directories) a tree may hold before it reaches `mkfs.ext4 -d`."""


def tree_bytes(root: Path, what: str) -> int:
    """Bytes the files under `root` hold on disk, walked without recursion or following a
    link; BackendRefused, naming `what` and the bound, past MAX_TREE_DEPTH or MAX_TREE_ENTRIES,
    before any root tool sees the tree."""
    total = entries = 0
    for directory in treewalk.walk(root):
        if directory.depth > MAX_TREE_DEPTH:
            raise BackendRefused(f"{what} holds a directory more than {MAX_TREE_DEPTH} levels "
                                 "deep; DevCell makes no disk of it")
        entries += len(directory.entries)
        if entries > MAX_TREE_ENTRIES:
            raise BackendRefused(f"{what} holds more than {MAX_TREE_ENTRIES:,} entries; "
                                 "DevCell makes no disk of it")
        total += sum(st.st_blocks * 512 for _, st in directory.entries
                     if not stat.S_ISDIR(st.st_mode))
    return total


def mkfs(tree: Path | None, image: Path, size_bytes: int, label: str, *,
         exact: bool = False, times: exact_disk.Times | None = None) -> None:
    """A sparse ext4 file of `size_bytes` holding `tree` (or empty); the tree's bounds are
    checked first (tree_bytes). `exact` (a workspace): the disk then holds the tree exactly,
    times to the nanosecond and no `lost+found` (vm/exact_disk), with the times in `times`
    when the caller took them before anything read the tree."""
    if tree is not None:
        if exact and times is None:
            times = exact_disk.times_of(tree)  # first: reading a directory moves its atime
        tree_bytes(tree, f"the tree for {label}")
    argv = ["mkfs.ext4", "-q", "-F", "-L", label, "-E", "root_owner=0:0",
            *(["-d", str(tree)] if tree is not None else []), str(image),
            f"{max(size_bytes, 8 << 20) // 1024}k"]
    done = children.run(argv)
    if done.returncode != 0:
        raise BackendError(f"mkfs.ext4 failed for {image.name}: {done.stderr.strip()[-400:]}")
    if exact and tree is not None:
        exact_disk.match_tree(image, tree, times or {})
    elif exact:
        exact_disk.drop_lost_found(image)


def rootfs(layout: VmLayout, image: str) -> tuple[str, Path]:
    """(image id, the image's root disk), built on first use."""
    from devcell.backends.container import backend as container  # the only module that speaks to Docker

    wanted = _IMAGE_ID.fullmatch(container.image_id(image))
    if wanted is None:
        raise BackendError(f"image {image} has an id DevCell does not understand")
    image_hex = wanted.group(1)
    final = layout.images / f"{image_hex}-g{vm_guest.VERSION}"
    if (final / "rootfs.ext4").is_file():
        return image_hex, final / "rootfs.ext4"
    _mkdir_private(layout.images)
    temporaries.remove_dead(layout.images)
    tmp = layout.images / temporaries.temp_name(image_hex)
    _mkdir_private(tmp)
    began = time.monotonic()
    try:
        with tempfile.TemporaryFile(dir=tmp) as tar:
            container.export_image(image, tar)
            tar.flush()
            tar.seek(0)
            (tmp / "tree").mkdir(mode=0o700)
            # 0755 whatever the umask: mkfs copies the tree's root mode to the guest's /
            # (an export has no entry for it), and 0700 would shut out the guest's users
            os.chmod(tmp / "tree", 0o755)
            done = _untar(tar.fileno(), tmp / "tree")
            if done:
                raise BackendError(f"unpacking image {image} failed: {done}")
        _add_guest_files(tmp / "tree", layout)
        size = int(tree_bytes(tmp / "tree", f"image {image}") * 1.5) + (256 << 20)
        mkfs(tmp / "tree", tmp / "rootfs.ext4", size, "devcell-root")
        removal.remove(tmp / "tree")
        (tmp / "rootfs.ext4").chmod(0o400)
        os.rename(tmp, final)
    except BaseException:
        removal.remove_quietly(tmp)
        raise
    logger.bind(image=image, seconds=round(time.monotonic() - began, 2)).info(
        "vm root disk built")
    return image_hex, final / "rootfs.ext4"


def _untar(fd: int, into: Path) -> str:
    """Unpack the tar on descriptor `fd` into `into` with GNU tar; an error text or ''."""
    done = children.run_bytes(["tar", "-x", "-p", "--numeric-owner", "-C", str(into), "-f", "-"],
                              stdin=fd)
    return "" if done.returncode == 0 else done.stderr.decode(errors="replace").strip()[-400:]
