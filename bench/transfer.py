#!/usr/bin/env python3
"""Export and import of a 1 GiB snapshot of 10,000 files (`devcell snapshot export -o - |
devcell snapshot import -` into a second state directory) vs. `tar -c | tar -x` of the same
checkpoint tree; also export to a file and import from it, each alone.

One container cell (network none) is filled once on the host (as bench/checkpoint.py fills it)
and checkpointed once (`snapshot create base`); every timed command is a whole process (or a
shell pipe of two). Each import is verified (Ready, 10,000 files, the tree's change signature
equal to the source checkpoint's) and deleted, untimed; so is each tar copy.

Needs the engine and the base image (scripts/docker-setup); ~4 GiB free disk.
Run by hand: .venv/bin/python bench/transfer.py [--runs 5]
"""

from __future__ import annotations

import json
import shlex
import shutil
import statistics
from collections.abc import Callable

import _common as c
from checkpoint import make_world

from devcell.backends.host import treecopy


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=5)
    c.add_workspace_options(p, mib=1024)
    args = p.parse_args()
    c.check_args(args)
    c.require_free_disk(args.mib, 5)

    with c.workdir(args.keep) as work:
        world = make_world(c.builds(args)[0], work, "big", args.files, args.mib)
        source, target = world.state, work / "target"
        env, target_env = world.env, c.env_for(target)
        world.dc("snapshot", "create", "big", "--name", "base")
        (checkpoint,) = source.glob("images/checkpoints/snap_*")
        signature = treecopy.signature(checkpoint / "workspace")
        print(f"checkpoint: {args.files} files, {args.mib} MiB in {checkpoint}")
        problems: list[str] = []
        archive = work / "base.tar"
        copy = work / "tar-copy"
        dev = shlex.quote(args.devcell)

        def imported_fresh() -> tuple[dict[str, str], Callable[[], None]]:
            def done() -> None:
                out = c.run_ok([args.devcell, "get", "snapshots", "moved", "-o", "json"],
                               target_env, capture=True).stdout
                status = json.loads(out)["status"]
                (made,) = target.glob("images/checkpoints/snap_*")
                if (status.get("phase") != "Ready"
                        or status.get("checkpoint", {}).get("files") != args.files
                        or treecopy.signature(made / "workspace") != signature):
                    problems.append(f"import: {status}")
                c.run_ok([args.devcell, "delete", "snapshot", "moved"], target_env)
            return env, done

        def tar_fresh() -> tuple[dict[str, str], Callable[[], None]]:
            shutil.rmtree(copy, ignore_errors=True)
            copy.mkdir()

            def done() -> None:
                if treecopy.signature(copy / "workspace") != signature:
                    problems.append("tar copy differs")
                shutil.rmtree(copy, ignore_errors=True)
            return env, done

        pipe = (f"{dev} snapshot export base -o - | DEVCELL_HOME={shlex.quote(str(target))} "
                f"{dev} snapshot import - --name moved")
        tar = (f"tar --format=posix -C {shlex.quote(str(checkpoint))} -cf - workspace | "
               f"tar -C {shlex.quote(str(copy))} -xpf -")
        label_pipe = "devcell snapshot export -o - | devcell snapshot import -"
        label_tar = "tar -c | tar -x (same tree)"
        samples = c.time_interleaved([
            c.Subject(label_pipe, ["bash", "-o", "pipefail", "-c", pipe], imported_fresh),
            c.Subject(label_tar, ["bash", "-o", "pipefail", "-c", tar], tar_fresh),
        ], args.runs, args.warmup)

        def export_fresh() -> tuple[dict[str, str], Callable[[], None]]:
            return env, lambda: None

        def import_fresh() -> tuple[dict[str, str], Callable[[], None]]:
            _, done = imported_fresh()
            return target_env, done

        samples.update(c.time_interleaved([
            c.Subject("devcell snapshot export -o FILE",
                      [args.devcell, "snapshot", "export", "base", "-o", str(archive)],
                      export_fresh),
            c.Subject("devcell snapshot import FILE",
                      [args.devcell, "snapshot", "import", str(archive), "--name", "moved"],
                      import_fresh),
        ], args.runs, args.warmup))
        c.print_timings(f"{args.mib} MiB / {args.files} files, {args.runs} runs each "
                        f"({args.warmup} warm-up)", samples, baseline=label_tar)
        ratio = statistics.median(samples[label_pipe]) / statistics.median(samples[label_tar])
        print(f"export | import / tar -c | tar -x = {ratio:.2f}")
        print(f"\nverification: {'PASS' if not problems else 'MISS'}")
        for problem in problems:
            print(f"  problem: {problem}")
        if c.run([args.devcell, "delete", "cell", "big", "--approve"], env).returncode != 0:
            print("could not delete the cell big; remove its container by hand")
        return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
