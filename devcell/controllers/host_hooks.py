"""The cell controller's part of spec.hooks.hostInitialize: when a plan runs them, and the
step that does (backends/host/commands.py runs the commands).

They run before each start of the cell, as devcontainer.json's initializeCommand runs before
each `up`: a plan that starts the runtime (a create, a start, a wake, a restart) runs the
host-initialize step ahead of its workspace, its image's pull or build and its start (after
the repairs of what an interrupted operation left). A plan that starts nothing runs
nothing on the host, so a re-apply of a running cell stays a no-op. The step checks the
configuration again: an allowance taken back since the manifest was admitted stops it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from devcell import config, progress, security
from devcell.backends.base import CellRef, Outputs
from devcell.backends.host import commands
from devcell.controllers.plan import Step
from devcell.controllers.steps import StepName
from devcell.store.objects import ObjectRecord

_STARTS = (StepName.START, StepName.RESTORE_MACHINE)
HOOK_TIMEOUT_S = 60


_BEFORE = (StepName.DELETE_CHECKPOINT, StepName.RESUME, StepName.ADOPT_VOLUME)
"""Steps that repair what an earlier operation left (a frozen cell, a superseded checkpoint)
and stay ahead of the host commands: a failing command must not keep a cell frozen."""


def insert(cell: ObjectRecord, steps: list[Step]) -> None:
    """Put the host-initialize step into `steps` when they start the cell and it has host
    commands: after the repairs, before everything the start does (the workspace's volume,
    the image's pull or build, stopping the old runtime: a failure leaves it running)."""
    hooks = (cell.spec.get("hooks") or {}).get("hostInitialize")
    if not hooks or not any(step.name in _STARTS for step in steps):
        return
    folder = os.path.dirname(cell.source) if cell.source and cell.source != "-" else ""
    at = next(i for i, step in enumerate(steps) if step.name not in _BEFORE)
    steps.insert(at, Step(StepName.HOST_INITIALIZE, {"cwd": folder}))


def run(ref: CellRef, step: Step, *, state_dir: Path,
        others: dict[str, dict[str, Any]] | None = None) -> Outputs:
    """Run the cell's host commands, said first on stderr (the developer sees what runs on
    their machine), each bounded by hooks.timeoutSeconds; refused when a folder this cell or
    another (`others`: the recorded cells with host mounts) writes could change them."""
    hooks: dict[str, Any] = ref.spec.get("hooks") or {}
    argvs = [list(map(str, argv)) for argv in hooks.get("hostInitialize") or []]
    if not argvs:
        return {"commands": 0}
    policy = config.load(state_dir).security
    if not policy.allow_host_commands:
        raise commands.HostCommandFailed(
            f"hooks.hostInitialize of cell {ref.name}: commands on the host are not allowed "
            f"(security.allowHostCommands: true in {policy.source} allows them)")
    cwd = str(step.args.get("cwd") or "")
    if not cwd:
        raise commands.HostCommandFailed(
            f"hooks.hostInitialize of cell {ref.name}: its manifest was not read from a file, "
            "so there is no folder to run them in; apply it from a file")
    written = security.host_command_problem(
        ref.spec, cwd, {n: o for n, o in (others or {}).items() if n != ref.name})
    if written:
        raise commands.HostCommandFailed(f"hooks.hostInitialize of cell {ref.name}: {written}")
    ran = commands.run_all(argvs, cwd=cwd,
                           timeout=float(hooks.get("timeoutSeconds", HOOK_TIMEOUT_S)),
                           cell=ref.name, say=progress.write)
    return {"commands": ran.commands, "seconds": round(ran.seconds, 3),
            "ran": "; ".join(commands.shown(argv) for argv in argvs)[:500]}
