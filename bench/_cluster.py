"""What the cluster benches share: devcell run in process against a state directory, and the
manifest of a cell that fills its workspace with FILES small files and MIB of random bytes
(then sleeps), for a snapshot, fork or move of it to carry."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

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
            f" do echo $i > f$i; i=$((i + 1)); done; head -c {mib}M /dev/urandom > big; cd ..;"
            " touch done; }; exec sleep 100000")
    return (f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata:\n  name: {name}\nspec:\n"
            f"  backend: container\n  image: {IMAGE}\n  resources: {{memory: 64Mi}}\n{extra}"
            f"  services:\n    - name: boot\n      command: [sh, -c, {json.dumps(boot)}]\n")
