"""`devcell image build-base`: the offline base image, and on a machine with QEMU its vm root
disk and boot files (so a vm cell's first create does not pay for them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
    _prepare_vm(resolve_state_dir(args.state_dir), base_image.BASE_IMAGE)
    return 0


def _prepare_vm(state_dir: Path, image: str) -> None:
    """The image's vm root disk, the initrd and the KVM probe, when QEMU is installed."""
    from devcell.backends import vm_disks, vm_image
    from devcell.backends.vm_layout import VmLayout
    from devcell.backends.vm_qemu import QemuDriver
    from devcell.errors import BackendUnavailable

    try:
        kernel = vm_image.find_kernel()
        vm_image.qemu_ready()
    except BackendUnavailable as exc:
        sys.stderr.write(f"vm backend not prepared: {exc}\n")
        return
    layout = VmLayout(state_dir)
    vm_disks.DiskStore(layout)  # its directories, owner-only
    _, rootfs = vm_image.rootfs(layout, image)
    initrd = vm_image.initrd(layout, kernel)
    accel = QemuDriver(accel_cache=layout.root / "accel.json").probe(kernel.path, initrd)
    sys.stdout.write(f"vm/{image} ready ({rootfs.stat().st_blocks >> 11} MiB root disk, kernel "
                     f"{kernel.release}, {accel.upper()})\n")
