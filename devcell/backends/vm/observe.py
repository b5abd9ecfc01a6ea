"""Every vm cell's machine of a state directory, by cell id, without QMP: markers and /proc.

The fast path (`devcell get`, the no-op re-apply) calls this before it acts: one listing of
the cells' directories and one scan of /proc for QEMU processes labelled for this state
directory. A machine is running when its labelled process lives; its directory's marker
gives the runtime hash.
"""

from __future__ import annotations

import os
from pathlib import Path

from devcell.backends.base import Observed
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.disks import read_json
from devcell.backends.vm.layout import VmLayout


def observe_all(state_dir: Path) -> dict[str, Observed]:
    layout = VmLayout(state_dir)
    prefix = layout.name_prefix
    running = {name.removeprefix(prefix) for name in vm_proc.scan(prefix)}
    out: dict[str, Observed] = {cell_id: Observed(exists=True, running=True)
                                for cell_id in running}
    try:
        entries = os.listdir(layout.cells)
    except OSError:
        entries = []
    for entry in entries:
        meta = read_json(layout.cells / entry / "cell.json") if not entry.startswith(".") \
            else None
        if meta is None:
            continue
        up = entry in running
        out[entry] = Observed(exists=True, running=up,
                              frozen=up and (layout.cells / entry / "frozen").exists(),
                              runtime_hash=meta.get("runtime_hash"),
                              detail={"state": "running" if up else "stopped",
                                      "accel": meta.get("accel")})
    return out
