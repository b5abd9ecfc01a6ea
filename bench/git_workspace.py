"""A container cell's code from git: `spec.workspace.source.git` vs the way it went in before.

From `apply` of a cell whose workspace is a git repository of `--files` files to the first
successful command in it, three ways, alternated in one run:
  source   `workspace.source.git` (DevCell clones while it makes the workspace), then
           `devcell exec CELL -- test -f ...`
  ssh      the same cell, then the first `ssh -F <(devcell ssh-config) CELL.devcell test -f
           ...` (`devcell ssh-config` run then, timed: OpenSSH's client, DevCell's
           ProxyCommand, asyncssh, key exchange, one session): a developer's first connection
  pipe     an empty workspace, then `git archive HEAD | devcell exec -i CELL -- tar -x`
           (what a user did before), then `devcell exec CELL -- test -f ...`
Each run deletes its cell. Same run, medians, ratio. Needs the Docker engine, git and
OpenSSH's client. Run by hand:

    .venv/bin/python bench/git_workspace.py --files 1000 --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEVCELL = str(REPO / ".venv" / "bin" / "devcell")
GIT_ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}


def _repo(root: Path, files: int) -> Path:
    work = root / "work"
    for n in range(files):
        directory = work / f"pkg{n % 20}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"mod{n}.py").write_text(f"VALUE = {n}\n" * 10)
    env = dict(os.environ, **GIT_ENV)
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "code"]):
        subprocess.run(["git", *args], cwd=work, check=True, env=env, capture_output=True)
    bare = root / "repos" / "project.git"
    bare.parent.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare


def _manifest(path: Path, name: str, source: str) -> None:
    path.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
        f"metadata: {{name: {name}}}\nspec:\n  backend: container\n"
        "  image: devcell/busybox:latest\n  network: {mode: none}\n" + source +
        "  services:\n    - name: idle\n      command: [sleep, '600']\n")


def _run(argv: list[str], env: dict[str, str], **kw: object) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, **kw)  # type: ignore[call-overload]
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {done.stderr.decode()[-400:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devcell-bench-git-") as tmp:
        root = Path(tmp)
        bare = _repo(root, args.files)
        state = root / "state"
        state.mkdir(mode=0o700)
        (state / "config.yaml").write_text(
            "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
            f"security:\n  allowedHostPaths: ['{bare.parent}']\n")
        os.chmod(state / "config.yaml", 0o600)
        env = dict(os.environ, DEVCELL_HOME=str(state))
        config = root / "ssh_config"
        times: dict[str, list[float]] = {"source": [], "ssh": [], "pipe": []}
        for n in range(args.runs):
            for way in ("source", "ssh", "pipe"):
                name = f"{way}{n}"
                manifest = root / f"{name}.yaml"
                _manifest(manifest, name, f"  workspace: {{source: {{git: {{url: '{bare}'}}}}}}\n"
                          if way != "pipe" else "")
                began = time.perf_counter()
                _run([DEVCELL, "apply", "-f", str(manifest)], env)
                if way == "pipe":
                    archive = subprocess.run(["git", "--git-dir", str(bare), "archive", "HEAD"],
                                             check=True, capture_output=True).stdout
                    _run([DEVCELL, "exec", "-i", name, "--", "tar", "-x", "-C", "/workspace"],
                         env, input=archive)
                if way == "ssh":  # as `ssh -F <(devcell ssh-config) CELL.devcell ...`
                    config.write_bytes(subprocess.run([DEVCELL, "ssh-config"], env=env,
                                                      check=True, capture_output=True).stdout)
                    _run(["ssh", "-F", str(config), f"{name}.devcell",
                          "test -f /workspace/pkg0/mod0.py"], env)
                else:
                    _run([DEVCELL, "exec", name, "--", "test", "-f",
                          "/workspace/pkg0/mod0.py"], env)
                times[way].append(time.perf_counter() - began)
                _run([DEVCELL, "delete", "-f", str(manifest), "--approve"], env)
    s, p = statistics.median(times["source"]), statistics.median(times["pipe"])
    h = statistics.median(times["ssh"])
    print(f"{args.files} files, {args.runs} runs each, alternated, medians (apply to the first "
          "command that sees the code)")
    print(f"| workspace.source.git, first exec | {s:.2f} s | git archive piped into exec | "
          f"{p:.2f} s | ratio | {s / p:.2f} |")
    print(f"| workspace.source.git, first ssh | {h:.2f} s | (ssh over exec | "
          f"+{h - s:.2f} s) |")


if __name__ == "__main__":
    main()
