"""The guest's stream helper (guest_streams.c) built once with the host's gcc, kept by its hash.

The helper must run in any image (musl, glibc, none), so it is linked statically against the
host's glibc; it calls nothing that needs NSS (a user name is looked up in the guest's
/etc/passwd by the helper itself). It is built when a root disk is built, into
`<state>/vm/helpers/streams-<hash>` (written to a temporary, then renamed), and never again
while its source is the same; the hash is part of the guest files' version (vm/guest.py), so
a changed helper rebuilds the images. gcc missing is named with the apt-get line.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from devcell.backends.host import children
from devcell.errors import BackendError, BackendUnavailable

SOURCE = Path(__file__).with_name("guest_streams.c")
INSTALL = "apt-get install -y gcc libc6-dev"


def source_hash() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]


def helper(cache: Path) -> bytes:
    """The helper's static executable, built into `cache` on first use."""
    final = cache / f"streams-{source_hash()}"
    if final.is_file():
        return final.read_bytes()
    if shutil.which("gcc") is None:
        raise BackendUnavailable(f"gcc is needed once to build vm cells' stream helper; "
                                 f"install it: {INSTALL}")
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        out = Path(tmp) / "streams"
        try:
            done = children.run_bytes(["gcc", "-static", "-O2", "-s", "-o", str(out),
                                       str(SOURCE)], timeout=300)
        except children.TimeoutExpired:
            raise BackendUnavailable("building vm cells' stream helper with gcc took more "
                                     "than 300 s") from None
        if done.returncode != 0 or not out.is_file():
            err = done.stderr.decode(errors="replace")
            tail = " ".join(err.strip().splitlines()[-3:])[-400:]
            raise BackendUnavailable(f"building vm cells' stream helper with gcc failed "
                                     f"({tail}); install the toolchain: {INSTALL}")
        os.replace(out, final)
    data = final.read_bytes()
    if not data.startswith(b"\x7fELF"):
        raise BackendError(f"the stream helper {final} is not an executable; remove it")
    return data
