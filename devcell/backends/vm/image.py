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
from devcell.backends.host import children, temporaries
from devcell.backends.vm import clock as vm_clock
from devcell.backends.vm import guest as vm_guest
from devcell.backends.vm.layout import VmLayout
from devcell.errors import BackendError, BackendUnavailable
from devcell.log import logger

KERNEL_GLOB = "vmlinuz-*-cloud-amd64"
AGENT = Path("/usr/sbin/qemu-ga")
INSTALL = ("apt-get install -y qemu-system-x86 qemu-utils linux-image-cloud-amd64 "
           "busybox-static qemu-guest-agent")
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
    if not AGENT.is_file():
        raise BackendUnavailable(f"qemu-guest-agent is not installed; install it: {INSTALL}")
    listed = children.run(["ldd", str(AGENT)])
    if listed.returncode != 0:
        raise BackendError(f"cannot list the libraries of {AGENT}: {listed.stderr.strip()}")
    libs = [Path(p) for p in re.findall(r"(/\S+)", listed.stdout)]
    return [AGENT, *libs]


def _add_guest_files(root: Path) -> None:
    guest = root / vm_guest.GUEST_DIR
    (guest / "ga").mkdir(parents=True)
    (guest / "bin").mkdir()
    shutil.copy2(base_image.find_busybox(), guest / "busybox")
    for applet in ("sh", "mount", "sleep", "cat", "date", "mkdir", "sync", "hostname"):
        (guest / "bin" / applet).symlink_to("../busybox")
    for path in _agent_files():
        shutil.copyfile(path, guest / "ga" / path.name)
        (guest / "ga" / path.name).chmod(0o755)
    (guest / "init").write_text(vm_guest.ROOT_INIT)
    (guest / "init").chmod(0o755)
    (guest / "clock").write_bytes(vm_clock.program())
    (guest / "clock").chmod(0o700)
    for mount_point in ("dev", "proc", "sys", "run", "tmp", "devcell"):
        (root / mount_point).mkdir(exist_ok=True)


def _tree_bytes(root: Path) -> int:
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            total += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return total


def mkfs(tree: Path | None, image: Path, size_bytes: int, label: str) -> None:
    """A sparse ext4 file of `size_bytes` holding `tree` (or empty)."""
    argv = ["mkfs.ext4", "-q", "-F", "-L", label, "-E", "root_owner=0:0",
            *(["-d", str(tree)] if tree is not None else []), str(image),
            f"{max(size_bytes, 8 << 20) // 1024}k"]
    done = children.run(argv)
    if done.returncode != 0:
        raise BackendError(f"mkfs.ext4 failed for {image.name}: {done.stderr.strip()[-400:]}")


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
            (tmp / "tree").mkdir(mode=0o755)
            done = _untar(tar.fileno(), tmp / "tree")
            if done:
                raise BackendError(f"unpacking image {image} failed: {done}")
        _add_guest_files(tmp / "tree")
        size = int(_tree_bytes(tmp / "tree") * 1.5) + (256 << 20)
        mkfs(tmp / "tree", tmp / "rootfs.ext4", size, "devcell-root")
        shutil.rmtree(tmp / "tree")
        (tmp / "rootfs.ext4").chmod(0o400)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.bind(image=image, seconds=round(time.monotonic() - began, 2)).info(
        "vm root disk built")
    return image_hex, final / "rootfs.ext4"


def _untar(fd: int, into: Path) -> str:
    """Unpack the tar on descriptor `fd` into `into` with GNU tar; an error text or ''."""
    done = children.run_bytes(["tar", "-x", "-p", "--numeric-owner", "-C", str(into), "-f", "-"],
                              stdin=fd)
    return "" if done.returncode == 0 else done.stderr.decode(errors="replace").strip()[-400:]
