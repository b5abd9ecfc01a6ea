"""`gc` and `image ls|prune|build-base` through a server (cli/remote.py): POST /api/v1/gc,
GET /api/v1/images, POST /api/v1/images/prune|build-base (server/machine_routes.py: gc, image
prune and build-base an admin's, image ls and a prune's dry run every role's), each answer
checked against its OpenAPI schema (Client._shaped) and printed by the command's own printer,
so the output is the same bytes as on the server's machine. What the server logs while it
works (-v) stays in its log; a build says nothing until it is done."""

from __future__ import annotations

import argparse

from devcell.cli import cmd_gc, cmd_image


def run_gc(args: argparse.Namespace) -> int:
    return cmd_gc.print_report(args, args.remote.gc(approve=args.approve,
                                                    dry_run=args.dry_run))


def run_image_ls(args: argparse.Namespace) -> int:
    return cmd_image.print_ls(args, list(args.remote.images()))


def run_image_prune(args: argparse.Namespace) -> int:
    return cmd_image.print_pruned(args, args.remote.prune_images(dry_run=args.dry_run))


def run_image_build_base(args: argparse.Namespace) -> int:
    return cmd_image.print_built(args.remote.build_base_image(force=args.force))
