"""A tiny static x86-64 program that reseeds a restored guest's random generator.

Two forks resumed from one memory snapshot start with the same kernel CRNG state, so their
/dev/urandom would give the same bytes until the kernel's next timed reseed (up to a minute).
QEMU's `vmgenid` device makes Linux reseed on restore, but only through a driver the Debian
cloud kernel does not build (CONFIG_VMGENID is off), and the guest image has no compiler or
interpreter to call the ioctls. So DevCell writes this program into the guest through the
agent and runs it: it reads a `struct rand_pool_info` (256 bits of the host's randomness) from
standard input, credits it with RNDADDENTROPY and forces a reseed with RNDRESEEDCRNG (both
need root: the agent runs as root). Its exit status is the negated errno of the first failing
call, 0 on success. Built here as bytes (an ELF header, one program header, 120 bytes of
code), so no toolchain is needed anywhere.
"""

from __future__ import annotations

import os
import struct

from devcell.backends.vm import elf as vm_elf

RNDADDENTROPY = 0x40085203
RNDRESEEDCRNG = 0x5207


def _code() -> bytes:
    head = (b"\x48\x83\xec\x40"  # sub rsp, 64
            b"\x31\xc0"  # xor eax, eax                       read(0, rsp, 40)
            b"\x31\xff"  # xor edi, edi
            b"\x48\x89\xe6"  # mov rsi, rsp
            b"\xba\x28\x00\x00\x00"  # mov edx, 40
            b"\x0f\x05"  # syscall
            b"\xb8\x02\x00\x00\x00")  # mov eax, 2                open(path, O_WRONLY)
    lea = b"\x48\x8d\x3d"  # lea rdi, [rip + disp32]
    after_lea = (b"\xbe\x01\x00\x00\x00"  # mov esi, 1
                 b"\x31\xd2"  # xor edx, edx
                 b"\x0f\x05"  # syscall
                 b"\x89\xc3"  # mov ebx, eax (fd)
                 b"\x89\xdf"  # mov edi, ebx                  ioctl(fd, RNDADDENTROPY, rsp)
                 b"\xb8\x10\x00\x00\x00"  # mov eax, 16
                 + b"\xbe" + struct.pack("<I", RNDADDENTROPY)
                 + b"\x48\x89\xe2"  # mov rdx, rsp
                 b"\x0f\x05"  # syscall
                 b"\x85\xc0")  # test eax, eax
    reseed = (b"\x89\xdf"  # mov edi, ebx                     ioctl(fd, RNDRESEEDCRNG, 0)
              b"\xb8\x10\x00\x00\x00"  # mov eax, 16
              + b"\xbe" + struct.pack("<I", RNDRESEEDCRNG)
              + b"\x31\xd2"  # xor edx, edx
              b"\x0f\x05")  # syscall
    leave = (b"\x89\xc7"  # mov edi, eax                      exit(-eax)
             b"\xf7\xdf"  # neg edi
             b"\xb8\x3c\x00\x00\x00"  # mov eax, 60
             b"\x0f\x05")  # syscall
    jump = b"\x75" + bytes([len(reseed)])  # jnz leave
    body = head + lea + b"\0\0\0\0" + after_lea + jump + reseed + leave
    path_at = len(body)
    disp = path_at - (len(head) + len(lea) + 4)
    body = head + lea + struct.pack("<i", disp) + after_lea + jump + reseed + leave
    return body + b"/dev/urandom\0"


def program() -> bytes:
    """The whole ELF file."""
    return vm_elf.executable(_code())


def entropy() -> bytes:
    """A `struct rand_pool_info` holding 256 bits of the host's randomness, credited as such."""
    return struct.pack("<ii", 256, 32) + os.urandom(32)
