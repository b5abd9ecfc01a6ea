"""`devcell image build-base|ls|prune`: the offline base image (and, on a machine with QEMU, its vm
root disk and boot files, so a vm cell's first create does not pay for them), and the images
DevCell pulled or built."""

from __future__ import annotations

import argparse
import json
import sys


def run_build_base(args: argparse.Namespace) -> int:
    from devcell.api import base_image
    from devcell.cli import log_sink
    from devcell.store.db import resolve_state_dir

    log_sink.configure(args.verbose)
    made = base_image.build(resolve_state_dir(args.state_dir), force=args.force)
    sys.stdout.write(f"image/{made.image} {'built' if made.built else 'unchanged'} "
                     f"({made.image_id[:19]})\n")
    if made.node_tools_id is not None:
        sys.stdout.write(f"image/devcell/nodetools:2 ready ({made.node_tools_id[:19]}; "
                         "every node of a cluster needs it)\n")
    elif made.node_tools_problem is not None:
        sys.stderr.write(f"node tools image not made: {made.node_tools_problem}\n")
    if made.vm is not None:
        vm = made.vm
        sys.stdout.write(f"vm/{vm.image} ready ({vm.root_disk_mib} MiB root disk, kernel "
                         f"{vm.kernel_release}, {vm.accel.upper()})\n")
    elif made.vm_problem is not None:
        sys.stderr.write(f"vm backend not prepared: {made.vm_problem}\n")
    return 0


def run_ls(args: argparse.Namespace) -> int:
    from devcell.api import images, render
    from devcell.cli import log_sink
    from devcell.cli.cmd_gc import size
    from devcell.store.db import resolve_state_dir

    log_sink.configure(args.verbose)
    rows = images.list_images(resolve_state_dir(args.state_dir))
    if args.output == "json":
        items = [{"image": r.image, "id": r.id, "digest": r.digest, "size": r.size,
                  "present": r.present, "moved": r.moved, "pulledAt": r.pulled_at,
                  "cells": list(r.cells), "containers": list(r.containers),
                  "replaced": list(r.replaced), "replacedSize": r.replaced_size,
                  "origin": r.origin, "tags": list(r.tags)}
                 for r in rows]
        # ensure_ascii: every control, C1 and bidi character of a name comes out escaped.
        sys.stdout.write(json.dumps({"kind": "List", "items": items}, indent=2) + "\n")
        return 0
    if not rows:
        sys.stderr.write("no images pulled or built by DevCell in this state directory\n")
        return 0

    def state(r: images.ImageRow) -> str:
        if not r.present:
            return "gone"
        if r.moved:
            return "tag moved (not DevCell's now)"
        return f"in use: {', '.join((*r.cells, *r.containers))}" if r.in_use else "unused"

    render.table(["IMAGE", "ID", "SIZE", "ORIGIN", "AT", "STATE"],
                 [[r.image, r.id.removeprefix("sha256:")[:12], size(r.size), r.origin, r.pulled_at,
                   state(r) + (f" (+{len(r.replaced)} earlier, {size(r.replaced_size)})"
                               if r.replaced else "")] for r in rows])
    return 0


def run_prune(args: argparse.Namespace) -> int:
    from devcell.api import images
    from devcell.cli import log_sink
    from devcell.cli.cmd_gc import size
    from devcell.names import printable
    from devcell.store.db import resolve_state_dir

    log_sink.configure(args.verbose)
    report = images.prune(resolve_state_dir(args.state_dir), dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    out = sys.stdout
    for name in report.removed:
        out.write(f"image/{printable(name)} {verb}\n")
    for name, why in report.kept:
        out.write(f"image/{printable(name)} kept: {printable(why)}\n")
    for name in report.forgotten:
        out.write(f"image/{printable(name)} forgotten: the engine no longer holds what "
                  "DevCell pulled under this name\n")
    out.write(f"{'would free' if args.dry_run else 'freed'} up to {size(report.freed_bytes)}\n")
    return 0
