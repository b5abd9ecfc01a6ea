"""vm backend: where a wake's time goes, phase by phase, until the guest agent runs `true`.

One vm cell (the base image, a workspace disk, one service) is booted, then put to sleep and
woken `--runs` times; each wake is traced from `restore_machine()` to the end of the
following `exec(["true"])`, as bench/vm.py times a resume. The trace wraps DevCell's own
functions in this process (nothing in devcell/ is changed): QEMU's launch (started and
daemonized), each QMP command, each guest agent connection (FIFOs opened or socket
connected, each sync
round answered, closed) and each agent command (guest-exec, guest-exec-status, ...). Printed
per wake as offsets from its start, then the median of each phase's offset.
Real QEMU (TCG here). Run by hand, never by pytest:

    .venv/bin/python bench/vm_wake.py --mib 128 --runs 5
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vm import COUNTER, IMAGE, until_usable  # noqa: E402

from devcell.backends.base import CellRef  # noqa: E402
from devcell.backends.vm.backend import VmBackend  # noqa: E402
from devcell.backends.vm.drivers import qemu as vm_qemu  # noqa: E402
from devcell.backends.vm.drivers import qmp as vm_qmp  # noqa: E402
from devcell.backends.vm.proc import kill, scan  # noqa: E402

EVENTS: list[tuple[float, str]] = []


def mark(what: str) -> None:
    EVENTS.append((time.perf_counter(), what))


def wrap(owner: Any, name: str, label: Callable[..., str]) -> None:
    """Replace owner.name by a function that marks its return (labelled from its args)."""
    inner = getattr(owner, name)

    def traced(*args: Any, **kwargs: Any) -> Any:
        result = inner(*args, **kwargs)
        mark(label(*args, **kwargs))
        return result

    setattr(owner, name, traced)


def _synced_label(agent: Any, token: int, deadline: float) -> str:
    return "agent sync answered"


def install() -> None:
    wrap(VmBackend, "_config", lambda *a, **k: "machine config made")
    wrap(vm_qemu.children, "run_bytes", lambda *a, **k: "QEMU's command returned")
    wrap(vm_qemu.QemuDriver, "_launch", lambda *a, **k: "QEMU started (daemonized)")
    wrap(vm_qmp.Qmp, "command", lambda self, name, *a, **k: f"QMP {name}")
    inner_connect = vm_qmp.connect

    def connect(directory: Path, name: str, *, timeout: float) -> Any:
        sock = inner_connect(directory, name, timeout=timeout)
        mark(f"{name} connected")
        return sock
    vm_qmp.connect = connect  # type: ignore[assignment]
    if hasattr(vm_qemu, "connect"):  # the resume's early connection to the agent
        vm_qemu.connect = connect  # type: ignore[attr-defined]
    wrap(vm_qmp.PipeStream, "__init__", lambda *a, **k: "agent FIFOs opened")
    wrap(vm_qmp.Agent, "_synced", _synced_label)
    wrap(vm_qmp.Agent, "command", lambda self, name, *a, **k: f"agent {name}")
    wrap(vm_qmp.Agent, "__exit__", lambda *a: "agent closed")


def _phases(began: float, events: list[tuple[float, str]]) -> list[tuple[str, float]]:
    """Events as (label, offset); repeated guest-exec-status polls folded into the last one
    with a count, repeated QMP query-status likewise."""
    out: list[tuple[str, float]] = []
    for at, what in events:
        if out and out[-1][0].startswith(what) and what.endswith(("status", "query-status")):
            count = int(out[-1][0].rpartition("x")[2]) + 1 if " x" in out[-1][0] else 2
            out[-1] = (f"{what} x{count}", at - began)
        else:
            out.append((what, at - began))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=128, help="guest RAM in MiB (default 128)")
    p.add_argument("--runs", type=int, default=5, help="wakes traced (default 5)")
    p.add_argument("--asleep", type=float, default=1.0, help="seconds asleep (default 1)")
    args = p.parse_args()
    install()
    traces: list[list[tuple[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="devcell-bench-vmwake-") as work:
        backend = VmBackend(state_dir=Path(work) / "state")
        spec = {"backend": "vm", "image": IMAGE, "workspace": {"mountPath": "/workspace"},
                "resources": {"memory": args.mib << 20},
                "services": [{"name": "counter", "command": ["sh", "-c", COUNTER]}]}
        ref = CellRef("cell_benchwake", "bench-wake", spec, "vol_benchwake")
        backend.create_volume(ref, "vol_benchwake", from_checkpoint=None)
        backend.create(ref, "bench")
        try:
            backend.start(ref)
            until_usable(backend, ref, time.perf_counter())
            for n in range(args.runs + 1):  # the first wake warms the page cache
                backend.save_machine(ref, f"sleep-{n}")
                time.sleep(args.asleep)
                EVENTS.clear()
                began = time.perf_counter()
                backend.restore_machine(ref, f"sleep-{n}")
                mark("restore_machine returned")
                code = backend.exec(ref, ["true"], stdout=io.BytesIO(), stderr=io.BytesIO())
                mark(f"exec true returned ({code})")
                trace = _phases(began, EVENTS)
                out = io.BytesIO()
                backend.exec(ref, ["/.devcell-guest/busybox", "date", "+%s"], stdout=out,
                             stderr=io.BytesIO())
                behind = time.time() - int(out.getvalue().strip() or b"0")
                print(f"wake {n}{' (warm-up)' if not n else ''}: guest clock {behind:.1f} s "
                      f"behind the host's just after", flush=True)
                for what, offset in trace:
                    print(f"  {offset:6.3f} s  {what}")
                if n:
                    traces.append(trace)
        finally:
            backend.delete(ref)
            for name, pid in scan(backend.layout.name_prefix).items():
                kill(pid, name)
    _medians(traces)
    return 0


def _medians(traces: list[list[tuple[str, float]]]) -> None:
    """The median offset of each phase, by its position (runs of the same shape only)."""
    shape = [statistics.mode(tuple(w.partition(" x")[0] for w, _ in t) for t in traces)][0]
    same = [t for t in traces if tuple(w.partition(" x")[0] for w, _ in t) == shape]
    print(f"\nmedians over {len(same)} of {len(traces)} wakes (same sequence of phases):")
    for i, what in enumerate(shape):
        print(f"  {statistics.median(t[i][1] for t in same):6.3f} s  {what}")


if __name__ == "__main__":
    raise SystemExit(main())
