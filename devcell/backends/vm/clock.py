"""A tiny resident x86-64 program in every vm guest that sets its clock when the host says so.

A machine's clock stands still while it sleeps, so every wake sets it to the host's. Through
the guest agent that meant `guest-exec` of `date -s`: qemu-ga forks, and under TCG the first
fork after a resume costs about 0.2 s (the guest translating again every path it runs), most
of what a wake spent after its QEMU was running (bench/vm_wake.py). This program, started by
the guest's init and restarted if it dies, waits in open(2) on the FIFO FIFO; the host opens
that FIFO through the agent (`guest-file-open` "r+": read-write, so the open never waits for a
reader) and writes one `struct timespec` (16 bytes, the host's CLOCK_REALTIME); the program
reads it and calls clock_settime(CLOCK_REALTIME) itself: no process is started in the guest.
A read of any other length sets nothing, and a path that is not a FIFO (a file the guest put
there, which would be read back and set again and again) ends the program, so the init's
loop retries it once a second instead of spinning. The guest's root can remove or replace the FIFO:
then the write goes wherever it points, inside the guest, and the host falls back to
`date -s` when the FIFO is not there (machines made before this program).

Built as bytes (vm/elf.py: headers, 117 bytes of code and the FIFO's path), no toolchain.
"""

from __future__ import annotations

import struct
import time

from devcell.backends.vm import elf as vm_elf

FIFO = "/run/devcell-clock"
"""On the guest's tmpfs /run (made by its init at boot; a sleep keeps it, being memory)."""
SYS_OPEN, SYS_READ, SYS_CLOSE, SYS_FSTAT, SYS_CLOCK_SETTIME, SYS_EXIT = 2, 0, 3, 5, 227, 60


def _code() -> bytes:
    path = FIFO.encode() + b"\0"
    code = (b"\x48\x81\xec\xa0\x00\x00\x00"  # sub rsp, 160        room for a struct stat
            # loop:                                             fd = open(FIFO, O_RDONLY)
            b"\xb8" + struct.pack("<I", SYS_OPEN)  # mov eax, 2
            + b"\x48\x8d\x3d\x62\x00\x00\x00"  # lea rdi, [rip + 0x62] (the path, below)
            b"\x31\xf6"  # xor esi, esi
            b"\x31\xd2"  # xor edx, edx
            b"\x0f\x05"  # syscall
            b"\x85\xc0"  # test eax, eax
            b"\x78\x4c"  # js fail                               no FIFO: exit(1)
            b"\x89\xc3"  # mov ebx, eax                          fstat(fd, rsp)
            b"\xb8" + struct.pack("<I", SYS_FSTAT)  # mov eax, 5
            + b"\x89\xdf"  # mov edi, ebx
            b"\x48\x89\xe6"  # mov rsi, rsp
            b"\x0f\x05"  # syscall
            b"\x8b\x44\x24\x18"  # mov eax, [rsp + 24]            st_mode
            b"\x25\x00\xf0\x00\x00"  # and eax, S_IFMT
            b"\x3d\x00\x10\x00\x00"  # cmp eax, S_IFIFO
            b"\x75\x2e"  # jne fail                              not a FIFO (a file, /dev/null, a
            #                                                   directory): exit, and the init's
            #                                                   loop tries again a second later
            b"\x31\xc0"  # xor eax, eax                          n = read(fd, rsp, 32)
            b"\x89\xdf"  # mov edi, ebx
            b"\x48\x89\xe6"  # mov rsi, rsp
            b"\xba\x20\x00\x00\x00"  # mov edx, 32
            b"\x0f\x05"  # syscall
            b"\x49\x89\xc4"  # mov r12, rax
            b"\xb8" + struct.pack("<I", SYS_CLOSE)  # mov eax, 3      close(fd)
            + b"\x89\xdf"  # mov edi, ebx
            b"\x0f\x05"  # syscall
            b"\x49\x83\xfc\x10"  # cmp r12, 16                   one whole timespec, or
            b"\x75\xac"  # jne loop                              nothing
            b"\xb8" + struct.pack("<I", SYS_CLOCK_SETTIME)  # mov eax, 227
            + b"\x31\xff"  # xor edi, edi                        CLOCK_REALTIME
            b"\x48\x89\xe6"  # mov rsi, rsp
            b"\x0f\x05"  # syscall                               (the kernel checks tv_nsec)
            b"\xeb\x9e"  # jmp loop
            # fail:
            b"\xb8" + struct.pack("<I", SYS_EXIT)  # mov eax, 60
            + b"\xbf\x01\x00\x00\x00"  # mov edi, 1
            b"\x0f\x05")  # syscall
    assert len(code) == 0x75 and code[0xc + 3] == 0x75 - 0x13  # the lea reaches the path
    return code + path


def program() -> bytes:
    """The whole ELF file."""
    return vm_elf.executable(_code())


def now() -> bytes:
    """The host's clock as the program reads it: a struct timespec (seconds, nanoseconds)."""
    ns = time.time_ns()
    return struct.pack("<qq", ns // 1_000_000_000, ns % 1_000_000_000)
