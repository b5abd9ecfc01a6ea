"""Hypervisor drivers of the vm backend: what boots, saves, restores and stops a machine.

    driver.py           the Driver protocol and a machine's configuration
    choose.py           which driver a machine uses (Firecracker where it works, else QEMU)
    qemu.py             QEMU's microvm machine (KVM when usable, TCG otherwise)
    qmp.py              QEMU's machine protocol and the guest agent's channel (sockets, FIFOs)
    firecracker.py      Firecracker, through its API (firecracker_api.py over http_unix.py)

Nothing here knows cells or the state database: a driver is given a machine's configuration.
"""
