"""A real image that plants links where DevCell writes its guest files, applied as a vm cell.

The image (imported into the engine from a tar made here) holds `/.devcell-guest` as a link to
a host directory, `/devcell` as a link to a host file, `/tmp` as a dangling link and `/run` as
a plain file. Before the fix, building its root disk wrote DevCell's init and agent into the
host directory as root and `apply` said "created"; a dangling mount point was a traceback. Now
the host is untouched and the cell boots on DevCell's own guest files. The combinations at
every path are tests/backends/vm/test_guest_files.py's property test.
"""

from __future__ import annotations

import io
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from devcell.backends.container import base_image
from tests.backends.engine import require_engine
from tests.backends.vm_machines import kill_machines, require_qemu
from tests.conftest import Cli

IMAGE = "devcell-test/hostile-guest-paths:1"


def _hostile_rootfs(host: Path) -> bytes:
    """The base image's root filesystem with the planted entries added."""
    base = tarfile.open(fileobj=io.BytesIO(base_image.rootfs_tar()))
    out = io.BytesIO()
    planted = {
        ".devcell-guest": (tarfile.SYMTYPE, str(host / "dir")),
        "devcell": (tarfile.SYMTYPE, str(host / "victim")),
        "tmp": (tarfile.SYMTYPE, "/nowhere/at/all"),
        "run": (tarfile.REGTYPE, "the image's file\n"),
    }
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for member in base.getmembers():
            if member.name.strip("./").split("/")[0] in planted:
                continue
            tar.addfile(member, base.extractfile(member) if member.isfile() else None)
        for name, (kind, value) in planted.items():
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = value
                tar.addfile(info)
            else:
                data = value.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
def hostile_image(tmp_path: Path) -> Iterator[Path]:
    require_engine()
    require_qemu()
    host = tmp_path / "host"
    (host / "dir").mkdir(parents=True)
    (host / "victim").write_text("the host's own file\n")
    client = docker.from_env()
    repository, _, tag = IMAGE.rpartition(":")
    client.api.import_image_from_data(_hostile_rootfs(host), repository=repository, tag=tag)
    try:
        yield host
    finally:
        client.images.remove(IMAGE, force=True)
        client.close()


def test_an_image_planting_links_at_the_guest_paths_writes_no_host_file(
        tmp_path: Path, state_dir: Path, cli: Cli, hostile_image: Path) -> None:
    manifest = tmp_path / "cell.yaml"
    manifest.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: planted}}
        spec:
          backend: vm
          image: {IMAGE}
          network: {{mode: none}}
          resources: {{memory: 128Mi}}
        """))
    try:
        applied = cli("apply", "-f", str(manifest))
        assert applied.returncode == 0, applied.stderr
        assert (hostile_image / "victim").read_text() == "the host's own file\n"
        assert list((hostile_image / "dir").iterdir()) == []
        done = cli("exec", "planted", "--", "sh", "-c",
                   "test -d /tmp && test -d /run && test -d /devcell && echo guest-ok")
        assert done.returncode == 0 and done.stdout.strip() == "guest-ok", done.stderr
    finally:
        cli("delete", "cell", "planted")
        kill_machines(state_dir)
