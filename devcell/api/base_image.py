"""The offline base image (`devcell image build-base`): built on the engine, and, on a machine
with QEMU, its vm root disk, the initrd and the accelerator probe made ahead, so that a vm
cell's first create does not pay for them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class VmReady:
    image: str
    root_disk_mib: int
    kernel_release: str
    accel: str


@dataclass(frozen=True)
class BaseImage:
    image: str
    image_id: str
    built: bool
    """False when the image existed and no rebuild was asked for."""
    vm: VmReady | None
    vm_problem: str | None
    """Why the vm backend was not prepared (QEMU or a kernel missing), when it was not."""
    node_tools_id: str | None = None
    """`devcell/nodetools:2`, the image of the jobs on a cluster's nodes (None: not made,
    node_tools_problem says why)."""
    node_tools_problem: str | None = None
    """Why the node tools image was not made (its line on stderr)."""

    def document(self) -> dict[str, Any]:
        """What `devcell image build-base` made, as data (the API's answer)."""
        vm = None if self.vm is None else {
            "image": self.vm.image, "rootDiskMiB": self.vm.root_disk_mib,
            "kernelRelease": self.vm.kernel_release, "accel": self.vm.accel}
        return {"image": self.image, "imageId": self.image_id, "built": self.built,
                "nodeToolsId": self.node_tools_id, "nodeToolsProblem": self.node_tools_problem,
                "vm": vm, "vmProblem": self.vm_problem}


def build(state_dir: Path, *, force: bool = False) -> BaseImage:
    from devcell.backends.container import backend as container
    from devcell.backends.container import base_image
    from devcell.errors import BackendError, BackendUnavailable

    backend = container.ContainerBackend(state_dir=state_dir)
    tools: str | None = None
    tools_problem: str | None = None
    try:
        existed = backend.image_exists(base_image.BASE_IMAGE)
        image_id = backend.build_base_image(force=force)
        try:
            tools = backend.build_node_tools_image(force=force)
        except BackendError as exc:
            tools_problem = str(exc)
    finally:
        backend.close()
    vm: VmReady | None = None
    problem: str | None = None
    try:
        vm = prepare_vm(state_dir, base_image.BASE_IMAGE)
    except BackendUnavailable as exc:
        problem = str(exc)
    return BaseImage(base_image.BASE_IMAGE, image_id, built=force or not existed, vm=vm,
                     vm_problem=problem, node_tools_id=tools, node_tools_problem=tools_problem)


def prepare_vm(state_dir: Path, image: str) -> VmReady:
    """The image's vm root disk, the initrd and the KVM probe; BackendUnavailable without QEMU."""
    from devcell.backends.vm import disks as vm_disks
    from devcell.backends.vm import image as vm_image
    from devcell.backends.vm.drivers.qemu import QemuDriver
    from devcell.backends.vm.layout import VmLayout

    kernel = vm_image.find_kernel()
    vm_image.qemu_ready()
    layout = VmLayout(state_dir)
    vm_disks.DiskStore(layout)  # its directories, owner-only
    _, rootfs = vm_image.rootfs(layout, image)
    initrd = vm_image.initrd(layout, kernel)
    accel = QemuDriver(accel_cache=layout.root / "accel.json").probe(kernel.path, initrd)
    return VmReady(image, rootfs.stat().st_blocks >> 11, kernel.release, accel)
