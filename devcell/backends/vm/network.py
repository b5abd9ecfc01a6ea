"""A vm cell's published ports: spec.network.ports as the host forwards of its machine.

A cell that publishes ports gets a network of its own (QEMU's user networking, restricted:
vm/drivers/qemu.py `user_network`) on which the guest is vm/guest.py's GUEST_ADDRESS; each
port is a forward from a host address (127.0.0.1 unless the manifest names another address
the configuration allows, as for containers) into the guest. What the backend cannot publish
(host networking, IPv6 host addresses, the Firecracker driver) is refused at admission
(backends/limits.py). The forwards are kept in the cell's machine record, so a wake restores
the machine with the network it was saved with.
"""

from __future__ import annotations

from typing import Any

from devcell.backends.vm.drivers.driver import Forward


def forwards(spec: dict[str, Any]) -> list[list[Any]]:
    """The host forwards of `spec`, as the machine record keeps them: [hostIP, hostPort,
    containerPort] each, in the spec's order."""
    return [[str(port.get("hostIP", "127.0.0.1")),
             int(port.get("hostPort", port["containerPort"])), int(port["containerPort"])]
            for port in (spec.get("network") or {}).get("ports") or []]


def of_record(meta: dict[str, Any]) -> tuple[Forward, ...]:
    """The forwards a machine record keeps; a ValueError (the record is damaged) for an
    entry that is not [address, port, port]."""
    out = []
    for entry in meta.get("forwards") or []:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and all(type(n) is int and 1 <= n <= 65535 for n in entry[1:])
                and entry[0] and all(c in "0123456789abcdef.:" for c in entry[0].lower())):
            raise ValueError(f"forward {entry!r} is not [address, port, port]")
        out.append(Forward(entry[0], entry[1], entry[2]))
    return tuple(out)
