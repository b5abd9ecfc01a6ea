"""vm backend under TCG: cold boot and resume with QEMU's translation buffer (tb-size) at
several sizes, to choose the one resumed machines get (vm_qemu.TB_MIB).

For each `--tb` value in turn (0: QEMU's own, 1 GiB), DEVCELL_VM_TCG_TB_MIB is set, so booted
and resumed machines both get it, and bench/vm.py's measure() runs one 256 MiB cell: cold
boot until the agent runs `true`, sleep, wake until `true` again; `--rounds` rounds, the
values taking turns, medians. Real QEMU, TCG. Run by hand:

    .venv/bin/python bench/vm_tb.py --tb 0,16,8 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vm  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tb", default="0,16,8", help="tb-size values in MiB (0: QEMU's own)")
    p.add_argument("--rounds", type=int, default=2, help="rounds per value (default 2)")
    args = p.parse_args()
    values = [int(v) for v in args.tb.split(",")]
    out: dict[int, dict[str, list[float]]] = {v: {"cold": [], "resume": []} for v in values}
    with tempfile.TemporaryDirectory(prefix="devcell-bench-vmtb-") as work:
        for n in range(args.rounds):
            for value in values:
                os.environ["DEVCELL_VM_TCG_TB_MIB"] = str(value)
                got = vm.measure(Path(work) / f"state-{value}-{n}", 256, 1)
                for key in ("cold", "resume"):
                    out[value][key] += got[key]
    print(f"\nmedians of {args.rounds} (256 MiB guest, TCG)")
    print("| tb-size | cold boot | resume |")
    print("| --- | --- | --- |")
    for value, r in out.items():
        print(f"| {value or 'QEMU default (1 GiB)'} | {statistics.median(r['cold']):.2f} s | "
              f"{statistics.median(r['resume']):.2f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
