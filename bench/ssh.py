"""`ssh CELL.devcell` against `devcell exec` and `docker exec`; `scp` against `docker cp`.

One container cell (DevCell's busybox image, no network), the Docker engine and OpenSSH's
client; every pair interleaved in one run, medians:
  round trip   `ssh -F CONFIG CELL.devcell true` (the ProxyCommand `devcell ssh-config`
               writes: a Python process, asyncssh, key exchange, one session)
               vs `devcell exec CELL -- true` vs `docker exec CONTAINER true`
  copy in      `scp` of a --mib file into the workspace vs `docker cp` of the same file
  copy out     the same, back to the host
  first ssh    `apply` of a cell whose workspace is a git repository of --files files, to the
               first `ssh CELL.devcell test -f ...` that sees its code (the cell deleted after)
Run by hand:

    .venv/bin/python bench/ssh.py --runs 9 --mib 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEVCELL = str(REPO / ".venv" / "bin" / "devcell")
sys.path.insert(0, str(REPO / "bench"))

from git_workspace import _repo  # noqa: E402  (the same 1,000-file repository)


def _run(argv: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(argv, env=env, capture_output=True, **kw)  # type: ignore[call-overload]
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {done.stderr.decode()[-400:]}")
    return done  # type: ignore[no-any-return]


def _manifest(path: Path, name: str, extra: str = "") -> None:
    path.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
        f"metadata: {{name: {name}}}\nspec:\n  backend: container\n"
        "  image: devcell/busybox:latest\n  network: {mode: none}\n" + extra +
        "  services:\n    - name: idle\n      command: [sleep, '3600']\n")


def _timed(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--files", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devcell-bench-ssh-") as tmp:
        root = Path(tmp)
        state = root / "state"
        state.mkdir(mode=0o700)
        bare = _repo(root, args.files)
        (state / "config.yaml").write_text(
            "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
            f"security:\n  allowedHostPaths: ['{bare.parent}']\n")
        os.chmod(state / "config.yaml", 0o600)
        env = dict(os.environ, DEVCELL_HOME=str(state))
        manifest = root / "bench.yaml"
        _manifest(manifest, "bench")
        _run([DEVCELL, "apply", "-f", str(manifest)], env)
        config = root / "ssh_config"
        config.write_bytes(_run([DEVCELL, "ssh-config"], env).stdout)
        container = _run(["docker", "ps", "-q", "--filter", "label=dev.devcell.cell=bench",
                          "--filter", f"label=dev.devcell.state-path={state}"], env
                         ).stdout.decode().split()[0]
        ssh = ["ssh", "-F", str(config)]
        payload = root / "payload.bin"
        with open(payload, "wb") as out:
            for _ in range(args.mib):
                out.write(os.urandom(1 << 20))
        back = root / "back.bin"
        times: dict[str, list[float]] = {k: [] for k in (
            "ssh", "devcell exec", "docker exec", "scp in", "docker cp in", "scp out",
            "docker cp out", "first ssh")}
        for n in range(args.runs):
            times["ssh"].append(_timed(lambda: _run([*ssh, "bench.devcell", "true"], env)))
            times["devcell exec"].append(_timed(lambda: _run(
                [DEVCELL, "exec", "bench", "--", "true"], env)))
            times["docker exec"].append(_timed(lambda: _run(
                ["docker", "exec", container, "true"], env)))
            times["scp in"].append(_timed(lambda: _run(
                ["scp", "-F", str(config), str(payload), "bench.devcell:/workspace/p.bin"], env)))
            times["docker cp in"].append(_timed(lambda: _run(
                ["docker", "cp", str(payload), f"{container}:/workspace/d.bin"], env)))
            times["scp out"].append(_timed(lambda: _run(
                ["scp", "-F", str(config), "bench.devcell:/workspace/p.bin", str(back)], env)))
            times["docker cp out"].append(_timed(lambda: _run(
                ["docker", "cp", f"{container}:/workspace/d.bin", str(back)], env)))
            if n < max(3, args.runs // 3):
                name = f"git{n}"
                cell = root / f"{name}.yaml"
                _manifest(cell, name, f"  workspace: {{source: {{git: {{url: '{bare}'}}}}}}\n")

                def first_ssh(name: str = name, cell: Path = cell) -> None:
                    _run([DEVCELL, "apply", "-f", str(cell)], env)
                    _run([DEVCELL, "ssh", name, "--", "test -f /workspace/pkg0/mod0.py"], env)

                times["first ssh"].append(_timed(first_ssh))
                _run([DEVCELL, "delete", "-f", str(cell), "--approve"], env)
        _run([DEVCELL, "delete", "-f", str(manifest), "--approve"], env)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.runs} runs interleaved, medians; {args.mib} MiB copies; first ssh over "
          f"{len(times['first ssh'])} runs of a {args.files}-file git source")
    print("| measure | DevCell | peer | ratio |")
    print("|---|---|---|---|")
    print(f"| round trip: `ssh CELL.devcell true` vs `docker exec true` | {med['ssh']*1000:.0f} ms"
          f" | {med['docker exec']*1000:.0f} ms | {med['ssh'] / med['docker exec']:.2f} |")
    print(f"| round trip: `devcell exec CELL -- true` vs `docker exec true` | "
          f"{med['devcell exec']*1000:.0f} ms | {med['docker exec']*1000:.0f} ms | "
          f"{med['devcell exec'] / med['docker exec']:.2f} |")
    print(f"| round trip: `ssh` vs `devcell exec` | {med['ssh']*1000:.0f} ms | "
          f"{med['devcell exec']*1000:.0f} ms | {med['ssh'] / med['devcell exec']:.2f} |")
    for way in ("in", "out"):
        s, d = med[f"scp {way}"], med[f"docker cp {way}"]
        print(f"| copy {way}, {args.mib} MiB: `scp` vs `docker cp` | {s:.2f} s | {d:.2f} s | "
              f"{s / d:.2f} |")
    print(f"| apply (git source, {args.files} files) to first `devcell ssh` | "
          f"{med['first ssh']:.2f} s | | |")


if __name__ == "__main__":
    main()
