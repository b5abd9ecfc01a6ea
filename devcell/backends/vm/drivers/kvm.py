"""Whether this process may open /dev/kvm: what both drivers ask before they offer KVM.

Opening the device read-write is the real test (it exists on this machine's hosts without
being usable, and permissions can refuse it); whether a guest then runs under it is a
separate probe with a timeout (choose.py), since nested KVM guests can hang.
"""

from __future__ import annotations

import os


def device_usable() -> bool:
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True
