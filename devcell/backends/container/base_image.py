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


NODE_TOOLS_IMAGE = "devcell/nodetools:2"
"""The image of the jobs that work on a node's workspace volumes (docs/cluster.md): the base
image's busybox, and GNU cp, GNU tar and curl with the libraries they link, under TOOLS_DIR.
GNU cp because a cluster checkpoint copies a workspace as the single host's does (`cp -a`:
links not followed, device files made with mknod and never read, setuid kept, holes kept:
busybox's cp writes a sparse file's holes out as zeros); GNU tar (`--sparse`) and curl
because a checkpoint moving to another node goes through a registry (node_transfer.py).
Tagged by its content's version (2: tar and curl added), so an engine holding an older one
is given this one instead of using it."""
TOOLS_DIR = "usr/lib/devcell"
GNU_CP_CANDIDATES = ("/usr/bin/cp", "/bin/cp")
GNU_TAR_CANDIDATES = ("/usr/bin/tar", "/bin/tar")
CURL_CANDIDATES = ("/usr/bin/curl",)
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
CA_BUNDLE = "ca-certificates.crt"
"""Under TOOLS_DIR: the build machine's CA certificates, which curl trusts (CURL_CA_BUNDLE)."""


def _linked(binary: Path) -> tuple[Path, list[Path]]:
    """The program interpreter and the shared libraries `binary` loads, as ldd finds them."""
    done = children.run(["ldd", str(binary)])
    if done.returncode != 0:
        raise BackendError(f"ldd {binary} failed: {done.stderr.strip()[:200]}")
    interpreter, libraries = None, []
    for line in done.stdout.splitlines():
        words = line.split()
        if "=>" in words and len(words) >= 3 and words[2].startswith("/"):
            libraries.append(Path(words[2]))
        elif words and words[0].startswith("/"):
            interpreter = Path(words[0])
    if interpreter is None:
        raise BackendError(f"ldd {binary} names no program interpreter")
    return interpreter, libraries


def _tool(candidates: tuple[str, ...], banner: bytes, what: str) -> Path:
    found = next((Path(c) for c in candidates if Path(c).is_file()), None)
    if found is None or banner not in children.run([str(found), "--version"]).stdout.encode():
        raise BackendError(f"{what} is needed to build the node tools image")
    return found


def node_tools_tar(busybox: Path | None = None) -> bytes:
    """The node tools image's root filesystem: the base image's, plus GNU cp, GNU tar and
    curl (run as `/usr/lib/devcell/cp`, `.../tar`, `.../curl`, finding their libraries there
    by LD_LIBRARY_PATH), the program interpreter at the path they name, and the CA
    certificates curl trusts."""
    tools = [_tool(GNU_CP_CANDIDATES, b"GNU coreutils", "GNU cp (coreutils)"),
             _tool(GNU_TAR_CANDIDATES, b"GNU tar", "GNU tar"),
             _tool(CURL_CANDIDATES, b"curl", "curl")]
    interpreter: Path | None = None
    libraries: dict[str, Path] = {}
    for tool in tools:
        interpreter, linked = _linked(tool)
        libraries.update({lib.name: lib for lib in linked})
    assert interpreter is not None
    bundle = next((Path(c) for c in CA_BUNDLES if Path(c).is_file()), None)
    buffer = io.BytesIO(rootfs_tar(busybox))
    buffer.seek(0, io.SEEK_END)
    # a tar archive ends with two zero blocks: the new members replace them
    buffer.seek(buffer.tell() - 2 * tarfile.BLOCKSIZE)
    buffer.truncate()
    buffer.seek(0)
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="a", format=tarfile.GNU_FORMAT) as tar:
        made: set[str] = set()
        members = [*((tool, f"{TOOLS_DIR}/{tool.name}") for tool in tools),
                   (interpreter, str(interpreter).lstrip("/")),
                   *((lib, f"{TOOLS_DIR}/{name}") for name, lib in sorted(libraries.items())),
                   *(((bundle, f"{TOOLS_DIR}/{CA_BUNDLE}"),) if bundle else ())]
        for source, name in members:
            parts = name.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                directory = "/".join(parts[:depth])
                if directory in made or directory in _DIRS:
                    continue
                made.add(directory)
                info = tarfile.TarInfo(directory)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
                tar.addfile(info)
            data = source.resolve().read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755, now
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
