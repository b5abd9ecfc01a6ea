"""`devcell cell fork --count N`: N forks of one snapshot, of a vm cell's machine snapshot and
of a container cell's snapshot, until all N are usable; and the host memory of the vm forks.

For each backend, one cell is applied and snapshotted (a `machine` snapshot for the vm cell:
its forks resume its processes, mapping its RAM copy-on-write), then, in turns:
  count   `devcell cell fork CELL --snapshot S --name cnt --count N`, then `devcell exec
          cnt-K -- true` for each K: from the command's start to the last exec's end
  loop    the peer: N `devcell cell fork CELL --snapshot S --name one-K` one after another,
          each followed by its `exec true` (the way before --count)
every fork deleted between the two (untimed). Whole processes, as a user runs them.
For the vm forks made by `--count`, once they have idled `--idle` seconds: each QEMU's PSS
and RSS (/proc/PID/smaps_rollup), their total against one guest (the parent, read alone
after idling as long, before the snapshot, as bench/vm.py reads it).
Real QEMU (TCG here) and the real Docker engine; never a mock. One run (`--rounds` more).
Needs scripts/docker-setup and scripts/vm-setup. Run by hand, never by pytest:

    .venv/bin/python bench/fork_count.py               # 10 forks, vm and container, ~3-6 min
    .venv/bin/python bench/fork_count.py --count 10 --rounds 1 --only vm
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcell.backends.vm.layout import VmLayout  # noqa: E402
from devcell.backends.vm.proc import kill, scan  # noqa: E402

IMAGE = "devcell/busybox:latest"
DEVCELL = [sys.executable, "-m", "devcell"]
COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 1; done"
MANIFEST = """apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {{name: {name}}}
spec:
  backend: {backend}
  image: {image}
  network: {{mode: none}}
  workspace: {{mountPath: /workspace}}
  resources: {{memory: 256Mi}}
  services:
    - name: counter
      command: [sh, -c, "{counter}"]
"""


class Devcell:
    def __init__(self, state: Path) -> None:
        self.state = state

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*DEVCELL, *args], capture_output=True, text=True, cwd=REPO,
                              env=dict(os.environ, DEVCELL_HOME=str(self.state)), timeout=1800)
        if check and done.returncode != 0:
            raise SystemExit(f"devcell {' '.join(args)} failed ({done.returncode}): "
                             f"{done.stderr.strip()[-600:]}")
        return done

    def usable(self, name: str) -> None:
        """`exec NAME -- true` until it succeeds (a fork is Ready when its command returns;
        this is what a user does next)."""
        deadline = time.monotonic() + 600
        while self("exec", name, "--", "true", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise SystemExit(f"cell {name} never ran a command")
            time.sleep(0.1)

    def cell_id(self, name: str) -> str:
        return str(json.loads(self("get", "cell", name, "-o", "json").stdout)["metadata"]["id"])


def _memory(pid: int) -> tuple[int, int]:
    """(PSS, RSS) in bytes of one process, from /proc/PID/smaps_rollup."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Pss", "Rss"):
            values[key] = int(rest.split()[0]) << 10
    return values["Pss"], values["Rss"]


def _qemu_pid(devcell: Devcell, name: str) -> int:
    layout = VmLayout(devcell.state)
    label = layout.machine_name(devcell.cell_id(name))
    pid = scan(layout.name_prefix).get(label)
    if pid is None:
        raise SystemExit(f"cell {name} has no running QEMU")
    return pid


def timed_forks(devcell: Devcell, parent: str, count: int, *, together: bool) -> float:
    """Seconds from the first fork command to the last fork's first `exec true`."""
    began = time.perf_counter()
    if together:
        devcell("cell", "fork", parent, "--snapshot", "s", "--name", "cnt", "--count", str(count))
        for k in range(1, count + 1):
            devcell.usable(f"cnt-{k}")
    else:
        for k in range(1, count + 1):
            devcell("cell", "fork", parent, "--snapshot", "s", "--name", f"one-{k}")
            devcell.usable(f"one-{k}")
    return time.perf_counter() - began


def remove(devcell: Devcell, prefix: str, count: int) -> None:
    names = [f"{prefix}-{k}" for k in range(1, count + 1)]
    devcell("delete", "cell", *names, "--approve")


def run_backend(work: Path, backend: str, count: int, rounds: int, idle: float
                ) -> dict[str, list[float]]:
    devcell = Devcell(work / f"state-{backend}")
    manifest = work / f"{backend}.yaml"
    manifest.write_text(MANIFEST.format(name="parent", backend=backend, image=IMAGE,
                                        counter=COUNTER))
    out: dict[str, list[float]] = {"count": [], "loop": [], "pss": [], "rss": [],
                                   "one_pss": [], "one_rss": []}
    try:
        devcell("apply", "-f", str(manifest))
        devcell.usable("parent")
        if backend == "vm":
            # The guest reads its files once (page cache), as a used machine has; then it
            # idles as long as the forks will, and is read alone.
            devcell("exec", "parent", "--", "sh", "-c", "cat /bin/* >/dev/null 2>&1; true")
            time.sleep(idle)
            one_pss, one_rss = _memory(_qemu_pid(devcell, "parent"))
            out["one_pss"].append(one_pss)
            out["one_rss"].append(one_rss)
        consistency = ["--consistency", "machine"] if backend == "vm" else []
        devcell("snapshot", "create", "parent", "--name", "s", *consistency)
        for n in range(rounds):
            order = (True, False) if n % 2 == 0 else (False, True)
            for together in order:
                seconds = timed_forks(devcell, "parent", count, together=together)
                out["count" if together else "loop"].append(seconds)
                print(f"  {backend} round {n + 1}: {'--count' if together else 'one by one'} "
                      f"{seconds:.2f} s", flush=True)
                if together and backend == "vm" and n == 0:
                    time.sleep(idle)
                    measured = [_memory(_qemu_pid(devcell, f"cnt-{k}"))
                                for k in range(1, count + 1)]
                    out["pss"].append(float(sum(p for p, _ in measured)))
                    out["rss"].append(float(sum(r for _, r in measured)))
                remove(devcell, "cnt" if together else "one", count)
        return out
    finally:
        devcell("delete", "cell", "parent", "--approve", check=False)
        if backend == "vm":
            for name, pid in scan(VmLayout(devcell.state).name_prefix).items():
                kill(pid, name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=10, help="forks (default 10)")
    p.add_argument("--rounds", type=int, default=1, help="rounds of count and loop, in turns "
                   "(default 1)")
    p.add_argument("--idle", type=float, default=20.0, help="seconds a vm guest idles before "
                   "its memory is read (default 20)")
    p.add_argument("--only", choices=["vm", "container"], default=None)
    args = p.parse_args()
    if not 1 <= args.count <= 100 or not 1 <= args.rounds <= 20:
        p.error("--count 1-100, --rounds 1-20")
    backends = [args.only] if args.only else ["vm", "container"]
    results = {}
    with tempfile.TemporaryDirectory(prefix="devcell-bench-forkn-") as work:
        for backend in backends:
            results[backend] = run_backend(Path(work), backend, args.count, args.rounds,
                                           args.idle)
    n = args.count
    print(f"\n{n} forks of one snapshot, {args.rounds} round(s), medians; load average "
          f"{os.getloadavg()[0]:.1f}")
    print("| backend | `fork --count` to all usable | one by one (peer) | count / peer | "
          "per fork |")
    print("| --- | --- | --- | --- | --- |")
    for backend, r in results.items():
        count, loop = statistics.median(r["count"]), statistics.median(r["loop"])
        print(f"| {backend} | {count:.2f} s | {loop:.2f} s | {count / loop:.2f} | "
              f"{count / n:.2f} s |")
    vm = results.get("vm")
    if vm and vm["pss"]:
        pss, rss, one = vm["pss"][0], vm["rss"][0], vm["one_pss"][0]
        print(f"\nvm: the {n} forks' QEMUs, idle {args.idle:.0f} s: total PSS "
              f"{pss / 2**20:.0f} MiB (RSS {rss / 2**20:.0f} MiB) against one guest (the "
              f"parent alone) PSS {one / 2**20:.0f} MiB (RSS {vm['one_rss'][0] / 2**20:.0f}): "
              f"{pss / one:.2f}x; {n} separate guests would be {n * one / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
