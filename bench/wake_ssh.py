"""Wake on ssh: `devcell ssh CELL -- true` to a sleeping vm cell (it is woken first, its saved
memory resumed) against the same command booting the cell cold (its saved machine set aside
before the run, as a failed resume does: the wake then boots it from its kept disks),
interleaved, medians and the ratio.

Both are timed as a user waits for them: whole processes, from the command to `true` having
run in the guest over SSH (OpenSSH's client through `devcell ssh-proxy`). The sleep (and the setting
aside) before each timed run is untimed. With --fallback, a third subject times the wake whose saved
machine cannot be resumed (its device state damaged before the run), which boots cold in the
same command. After every wake the process started before the first sleep is checked: it must
still run after a resumed wake (the bench stops if not), and be gone after a cold boot.
Real QEMU (TCG here), so absolute figures depend on the machine; read the ratio. Run by hand,
never by pytest:

    .venv/bin/python bench/wake_ssh.py --runs 5 [--mib 128] [--fallback]
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402

NAME = "wake-bench"
IMAGE = "devcell/busybox:latest"
MARK = "sleep 86400"


def manifest(mib: int) -> str:
    return (f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {NAME}}}\n"
            f"spec:\n  backend: vm\n  image: {IMAGE}\n  network: {{mode: none}}\n"
            f"  workspace: {{mountPath: /workspace}}\n  resources: {{memory: {mib}Mi}}\n")


def main() -> int:
    p = c.base_parser(__doc__.splitlines()[0], runs=5)
    p.add_argument("--mib", type=int, default=128, help="guest RAM in MiB (default 128)")
    p.add_argument("--fallback", action="store_true",
                   help="also time a wake whose saved machine cannot be resumed")
    args = p.parse_args()
    if shutil.which("ssh") is None:
        sys.exit("needs OpenSSH's client (apt-get install openssh-client)")
    devcell = args.devcell
    with c.workdir(args.keep) as work:
        env = c.env_for(work / "state")
        (work / "cell.yaml").write_text(manifest(args.mib))
        c.run_ok([devcell, "apply", "-f", str(work / "cell.yaml")], env, timeout=900)
        try:
            marked = _start_marked(devcell, env)
            state = {"pid": marked}

            def asleep() -> tuple[dict[str, str], Callable[[], None]]:
                c.run_ok([devcell, "cell", "sleep", NAME], env)
                return env, lambda: _check(devcell, env, state, restored=True)

            def set_aside() -> tuple[dict[str, str], Callable[[], None]]:
                c.run_ok([devcell, "cell", "sleep", NAME], env)
                _set_machine_aside(work / "state")
                return env, lambda: _restart_marked(devcell, env, state)

            def damaged() -> tuple[dict[str, str], Callable[[], None]]:
                c.run_ok([devcell, "cell", "sleep", NAME], env)
                _damage_saved_machine(devcell, env, work / "state")
                return env, lambda: _restart_marked(devcell, env, state)

            ssh = [devcell, "ssh", NAME, "--", "true"]
            subjects = [
                c.Subject("wake on ssh (memory resumed)", ssh, asleep),
                c.Subject("cold boot on ssh", ssh, set_aside),
            ]
            if args.fallback:
                subjects.append(c.Subject("wake on ssh, resume failed: cold", ssh,
                                          damaged))
            samples = c.time_interleaved(subjects, args.runs, args.warmup)
        finally:
            c.run([devcell, "delete", "cell", NAME], env, timeout=300)
    c.print_timings(f"wake on ssh vs cold boot of a {args.mib} MiB vm cell ", samples,
                    baseline="cold boot on ssh")
    wake = statistics.median(samples["wake on ssh (memory resumed)"])
    cold = statistics.median(samples["cold boot on ssh"])
    print(f"\nwake on ssh takes {wake / cold:.2f}x the cold boot's time ({wake:.2f} s vs "
          f"{cold:.2f} s medians), and brings the processes back (checked after each wake)")
    return 0


def _start_marked(devcell: str, env: dict[str, str]) -> str:
    done = c.run_ok([devcell, "exec", NAME, "--", "sh", "-c",
                     f"setsid {MARK} </dev/null >/dev/null 2>&1 & echo $!"], env, capture=True)
    return done.stdout.decode().strip()


def _alive(devcell: str, env: dict[str, str], pid: str) -> bool:
    done = c.run_ok([devcell, "exec", NAME, "--", "sh", "-c",
                     f"tr '\\0' ' ' < /proc/{pid}/cmdline 2>/dev/null || true"], env, capture=True)
    return done.stdout.decode().strip() == MARK


def _check(devcell: str, env: dict[str, str], state: dict[str, str], *, restored: bool) -> None:
    if _alive(devcell, env, state["pid"]) != restored:
        sys.exit(f"the process started before the sleep is {'gone' if restored else 'alive'} "
                 f"after the {'wake' if restored else 'cold boot'}")


def _restart_marked(devcell: str, env: dict[str, str], state: dict[str, str]) -> None:
    """After a cold boot: the marked process is gone; start another for the next wake."""
    _check(devcell, env, state, restored=False)
    state["pid"] = _start_marked(devcell, env)


def _set_machine_aside(state_dir: Path) -> None:
    """What a failed resume records (api/wake.py): the next start of the sleeping cell boots
    it cold from its kept disks, through the very same `devcell ssh` wake."""
    sys.path.insert(0, str(c.REPO))
    from devcell.api import wake

    if wake.set_machine_aside(state_dir, NAME, why="set aside by bench/wake_ssh.py") is None:
        sys.exit("the cell slept without a saved machine: nothing to set aside")


def _damage_saved_machine(devcell: str, env: dict[str, str], state_dir: Path) -> None:
    sys.path.insert(0, str(c.REPO))
    from devcell.backends.vm import disks as vm_disks
    from devcell.backends.vm.layout import VmLayout

    shown = json.loads(c.run_ok([devcell, "get", "cell", NAME, "-o", "json"], env,
                                capture=True).stdout)
    saved = VmLayout(state_dir).checkpoint(shown["status"]["sleep"]["checkpointId"])
    (saved / vm_disks.MEMORY).write_bytes(b"not a saved machine\n" * 64)


if __name__ == "__main__":
    raise SystemExit(main())
