"""`devcell image build-base|ls|prune`: the offline base image (and, on a machine with QEMU, its vm
root disk and boot files, so a vm cell's first create does not pay for them), and the images
DevCell pulled or built. Each prints its api call's document (the API's answer too: the same
printers serve `devcell --server URL image ...`, cli/remote_images.py)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def run_build_base(args: argparse.Namespace) -> int:
    from devcell.api import base_image
    from devcell.cli import log_sink
    from devcell.store.db import resolve_state_dir

    log_sink.configure(args.verbose)
    made = base_image.build(resolve_state_dir(args.state_dir), force=args.force)
    return print_built(made.document())


def print_built(made: dict[str, Any]) -> int:
    from devcell.names import printable

    sys.stdout.write(f"image/{printable(made['image'])} "
                     f"{'built' if made['built'] else 'unchanged'} "
                     f"({printable(made['imageId'][:19])})\n")
    if made["nodeToolsId"] is not None:
        sys.stdout.write(f"image/devcell/nodetools:2 ready ({printable(made['nodeToolsId'][:19])}"
                         "; every node of a cluster needs it)\n")
    elif made["nodeToolsProblem"] is not None:
        sys.stderr.write(f"node tools image not made: {printable(made['nodeToolsProblem'])}\n")
    vm = made["vm"]
    if vm is not None:
        sys.stdout.write(f"vm/{printable(vm['image'])} ready ({vm['rootDiskMiB']} MiB root "
                         f"disk, kernel {printable(vm['kernelRelease'])}, "
                         f"{printable(vm['accel'].upper())})\n")
    elif made["vmProblem"] is not None:
        sys.stderr.write(f"vm backend not prepared: {printable(made['vmProblem'])}\n")
    return 0


def run_ls(args: argparse.Namespace) -> int:
    from devcell.api import images
    from devcell.cli import log_sink
    from devcell.store.db import resolve_state_dir

    log_sink.configure(args.verbose)
    rows = images.list_images(resolve_state_dir(args.state_dir))
    return print_ls(args, [r.document() for r in rows])


def print_ls(args: argparse.Namespace, items: list[dict[str, Any]]) -> int:
    """The images (ImageRow.document's), as a table or -o json."""
    from devcell.api import render
    from devcell.api.render import size

    if args.output == "json":
        # ensure_ascii: every control, C1 and bidi character of a name comes out escaped.
        sys.stdout.write(json.dumps({"kind": "List", "items": items}, indent=2) + "\n")
        return 0
    if not items:
        sys.stderr.write("no images pulled or built by DevCell in this state directory\n")
        return 0

    def state(r: dict[str, Any]) -> str:
        if not r["present"]:
            return "gone"
        if r["moved"]:
            return "tag moved (not DevCell's now)"
        used = [*r["cells"], *r["containers"]]
        return f"in use: {', '.join(used)}" if used else "unused"

    render.table(["IMAGE", "ID", "SIZE", "ORIGIN", "AT", "STATE"],
                 [[r["image"], r["id"].removeprefix("sha256:")[:12], size(r["size"]),
                   r["origin"], r["pulledAt"],
                   state(r) + (f" (+{len(r['replaced'])} earlier, {size(r['replacedSize'])})"
                               if r["replaced"] else "")] for r in items])
    return 0


def run_prune(args: argparse.Namespace) -> int:
    from devcell.api import images
    from devcell.cli import log_sink
    from devcell.store.db import resolve_state_dir

    log_sink.configure(args.verbose)
    report = images.prune(resolve_state_dir(args.state_dir), dry_run=args.dry_run)
    return print_pruned(args, report.document())


def print_pruned(args: argparse.Namespace, report: dict[str, Any]) -> int:
    """What a prune removed, kept and forgot (PruneReport.document's)."""
    from devcell.api.render import size
    from devcell.names import printable

    verb = "would remove" if args.dry_run else "removed"
    out = sys.stdout
    for name in report["removed"]:
        out.write(f"image/{printable(name)} {verb}\n")
    for kept in report["kept"]:
        out.write(f"image/{printable(kept['image'])} kept: {printable(kept['why'])}\n")
    for name in report["forgotten"]:
        out.write(f"image/{printable(name)} forgotten: the engine no longer holds what "
                  "DevCell pulled under this name\n")
    out.write(f"{'would free' if args.dry_run else 'freed'} up to "
              f"{size(report['freedBytes'])}\n")
    return 0
