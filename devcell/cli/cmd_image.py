"""`devcell image build-base`: the offline base image for the container backend."""

from __future__ import annotations

import argparse
import sys

from devcell.errors import UsageError


def run_image(args: argparse.Namespace) -> int:
    if args.verb != "build-base":
        raise UsageError(f"unknown image verb {args.verb!r}")
    from devcell.backends import base_image, container
    from devcell.cli import logs
    from devcell.store.db import resolve_state_dir

    logs.configure(args.verbose)
    backend = container.ContainerBackend(state_dir=resolve_state_dir(args.state_dir))
    try:
        existed = backend.image_exists(base_image.BASE_IMAGE)
        image_id = backend.build_base_image(force=args.force)
    finally:
        backend.close()
    outcome = "unchanged" if existed and not args.force else "built"
    sys.stdout.write(f"image/{base_image.BASE_IMAGE} {outcome} ({image_id[:19]})\n")
    return 0
