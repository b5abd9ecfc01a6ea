"""What the cluster benches share: devcell run in process against a state directory, the
manifest of a cell that fills its workspace with FILES small files and MIB of random bytes
(then sleeps), for a snapshot, fork or move of it to carry, and the by-hand peer's way of
carrying a volume's files from one node's engine to another's through a registry."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.swarm import Node

IMAGE = "devcell/busybox:latest"
TOOLS = "devcell/nodetools:2"


def cli(state: Path, *words: str) -> str:
    from devcell.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--state-dir", str(state), *words])
    if code != 0:
        raise SystemExit(f"devcell {' '.join(words)}: {err.getvalue()}")
    return out.getvalue()


def manifest(name: str, files: int, mib: int, extra: str = "") -> str:
    boot = (f"cd /workspace; [ -e done ] || {{ mkdir src; cd src; i=0; while [ $i -lt {files} ];"
            f" do echo $i > f$i; i=$((i + 1)); done; head -c {mib}m /dev/urandom > big; cd ..;"
            " touch done; }; exec sleep 100000")
    return (f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata:\n  name: {name}\nspec:\n"
            f"  backend: container\n  image: {IMAGE}\n  resources: {{memory: 64Mi}}\n{extra}"
            f"  services:\n    - name: boot\n      command: [sh, -c, {json.dumps(boot)}]\n")


def carry(source: Node, target: Node, volume: str, into: str, ref: str) -> str:
    """The by-hand move of `volume`'s files on `source`'s engine into a new volume `into` on
    `target`'s, as image `ref`: GNU tar of the volume (the node tools image) into `docker
    import`, `docker push`; on the target `docker pull`, `docker create` and `docker export`
    of it into a `docker run` extracting into the volume. Returns the created container (the
    caller removes it, and the image on both engines)."""
    tar = subprocess.Popen(["docker", "-H", source.host, "run", "--rm", "--network", "none",
                            "-v", f"{volume}:/w:ro", "-e", "LD_LIBRARY_PATH=/usr/lib/devcell",
                            TOOLS, "/usr/lib/devcell/tar", "--sparse", "-C", "/w", "-cf", "-",
                            "."], stdout=subprocess.PIPE)
    subprocess.run(["docker", "-H", source.host, "import", "-", ref], stdin=tar.stdout,
                   check=True, capture_output=True)
    assert tar.wait() == 0
    source.docker("push", ref, timeout=1800)
    target.docker("pull", ref, timeout=1800)
    made = target.docker("create", ref, "true").stdout.decode().strip()
    export = subprocess.Popen(["docker", "-H", target.host, "export", made],
                              stdout=subprocess.PIPE)
    subprocess.run(["docker", "-H", target.host, "run", "--rm", "-i", "--network", "none",
                    "-v", f"{into}:/w", "-e", "LD_LIBRARY_PATH=/usr/lib/devcell", TOOLS,
                    "sh", "-c", "/usr/lib/devcell/tar -C /w -xf - && sync -f /w"],
                   stdin=export.stdout, check=True, capture_output=True)
    assert export.wait() == 0
    return made
