"""vm guest agent: reading one long reply line, DevCell's reader before and after issue 12's
hostile review.

The guest agent's reply to guest-exec-status carries up to 16 MiB of output per stream as
base64 on one line (an honest 16 MiB output is a ~22 MiB line; both streams ~45 MiB), and a
hostile guest can send a line up to the 64 MiB bound before it is refused. The reader before
the review appended each 64 KiB chunk to an immutable bytes and searched the whole buffer for
a newline after every chunk (quadratic in the line); the reader now (vm_qmp.JsonChannel)
appends to a bytearray and searches only the new bytes. Both read the same bytes from a
socketpair fed by a thread, same run, in turns; medians of --runs.

    .venv/bin/python bench/vm_agent_reply.py --runs 5
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcell.backends.vm.drivers.qmp import JsonChannel  # noqa: E402


def before(sock: socket.socket) -> bytes:
    """The reader as it was (main at 9815303), without its deadline and bound."""
    buffer = b""
    while b"\n" not in buffer:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise EOFError
        buffer += chunk
    line, _, buffer = buffer.partition(b"\n")
    return line


def after(sock: socket.socket) -> bytes:
    return JsonChannel(sock, "bench").read_line(time.monotonic() + 600)


def once(reader: str, size: int) -> float:
    ours, theirs = socket.socketpair()
    payload = b"A" * size + b"\n"
    feeder = threading.Thread(target=theirs.sendall, args=(payload,))
    began = time.perf_counter()
    feeder.start()
    line = (before if reader == "before" else after)(ours)
    took = time.perf_counter() - began
    feeder.join()
    ours.close()
    theirs.close()
    assert len(line) == size
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes-mib", default="1,16,45,63")
    args = parser.parse_args()
    print(f"{'line':>8} {'before (s)':>11} {'after (s)':>10} {'before/after':>13}")
    for mib in (int(x) for x in args.sizes_mib.split(",")):
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.runs):
            for reader in ("before", "after"):  # in turns: load on the host hits both
                times[reader].append(once(reader, mib << 20))
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        print(f"{mib:>5} MiB {b:>11.3f} {a:>10.3f} {b / a:>12.1f}x")


if __name__ == "__main__":
    main()
