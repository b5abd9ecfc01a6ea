"""The root filesystem of `devcell/busybox:latest`, built offline from Debian's busybox-static.

A tarball with /bin/busybox, one relative symbolic link per applet (`/bin/sh -> busybox`), and
the few files and directories a shell expects (/etc/passwd, /tmp, /workspace, ...). No image
registry is needed: the tarball is imported into the engine (`docker import`).
"""

from __future__ import annotations

import io
import shutil
import tarfile
import time
from pathlib import Path

from devcell.backends.host import children
from devcell.errors import BackendError

BASE_IMAGE = "devcell/busybox:latest"
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
_FILES = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    "etc/group": "root:x:0:\nnogroup:x:65534:\n",
    "etc/hostname": "devcell\n",
    "etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
}
_DIRS = {"bin": 0o755, "etc": 0o755, "tmp": 0o1777, "root": 0o700, "proc": 0o755,
         "sys": 0o755, "dev": 0o755, "var": 0o755, "var/log": 0o755, "workspace": 0o755,
         "usr": 0o755, "usr/bin": 0o755, "sbin": 0o755}


def find_busybox() -> Path:
    for candidate in BUSYBOX_CANDIDATES:
        path = Path(candidate)
        if path.is_file():
            return path
    found = shutil.which("busybox")
    if found:
        return Path(found)
    raise BackendError("busybox is not installed; install Debian's static build first: "
                       "apt-get install -y busybox-static")


def _static(binary: Path) -> bool:
    with binary.open("rb") as f:
        head = f.read(1 << 16)
    return head.startswith(b"\x7fELF") and b"ld-linux" not in head


def rootfs_tar(busybox: Path | None = None) -> bytes:
    """The image's root filesystem as an uncompressed tar archive."""
    binary = busybox or find_busybox()
    if not _static(binary):
        raise BackendError(f"{binary} is dynamically linked; the image needs the static build "
                           "(apt-get install -y busybox-static)")
    listed = children.run([str(binary), "--list"])
    applets = sorted(a for a in listed.stdout.split() if a and "/" not in a and a != "busybox")
    if listed.returncode != 0 or "sh" not in applets:
        raise BackendError(f"{binary} --list failed or has no sh applet")
    now = int(time.time())
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, mode in _DIRS.items():
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, now
            tar.addfile(info)
        data = binary.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode, info.mtime = len(data), 0o755, now
        tar.addfile(info, io.BytesIO(data))
        for applet in applets:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, "busybox", 0o777, now
            tar.addfile(info)
        for name, text in _FILES.items():
            raw = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(raw), 0o644, now
            tar.addfile(info, io.BytesIO(raw))
    return buffer.getvalue()
