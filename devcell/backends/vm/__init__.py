"""The vm backend: each cell a microVM, whose sleep keeps memory as well as disk.

The package's face is `backend.VmBackend` (named by the backend registry,
`devcell/backend_registry.py`). This `__init__` imports nothing, so `observe` and `capacity`
(what the fast paths read) cost only themselves.

    backend.py      the Backend: machines booted, slept, woken, forked; exec through the agent
    drivers/        the hypervisor boundary: the driver protocol, QEMU (and QMP and the guest
                    agent's channel), Firecracker (and its HTTP API), which one a machine uses,
                    whether /dev/kvm opens (kvm.py)
    layout.py       where the backend keeps things under the state directory (vm/...)
    image.py        an OCI image made a root disk (init, qemu-guest-agent, the clock program)
    extract.py      an image's layers unpacked for that root disk
    disks.py, layers.py  workspace disks, their checkpoints and the qcow2 layers they share
    memory.py       a machine snapshot: RAM, device state, root and config disks
    guest.py, guest_exec.py, clock.py, reseed.py, elf.py  what runs in the guest and how
    network.py      a cell's published ports as its machine's host forwards
    logs.py         service logs read through the agent
    observe.py, proc.py  which machines run now (QEMU processes by their -name)
    capacity.py     what the backend's storage costs, measured from the disk

The one import of another backend: `image.py` builds a root disk from the container backend's
images (named in pyproject.toml's backends contract).
"""
