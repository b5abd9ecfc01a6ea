"""The smallest static x86-64 Linux executable around a piece of machine code.

DevCell's own programs in a guest (vm/reseed.py, vm/clock.py) are a few dozen bytes of code:
an ELF header and one loadable, executable segment at BASE, the code right after the headers,
built here as bytes, so no toolchain is needed anywhere (the guest image has none either).
"""

from __future__ import annotations

import struct

BASE = 0x400000
HEADERS = 64 + 56
"""The ELF header and the one program header: the code starts at BASE + HEADERS."""


def executable(code: bytes) -> bytes:
    """The whole ELF file: `code` loaded at BASE + HEADERS and entered at its first byte."""
    size = HEADERS + len(code)
    elf = (b"\x7fELF\x02\x01\x01" + b"\0" * 9
           + struct.pack("<HHIQQQIHHHHHH", 2, 0x3E, 1, BASE + HEADERS, 64, 0, 0, 64, 56, 1,
                         0, 0, 0))
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, BASE, BASE, size, size, 0x1000)
    return elf + phdr + code
