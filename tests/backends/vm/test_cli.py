"""A vm cell driven through the CLI as a user drives it: apply, exec, sleep, start, delete."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import threading
import time
from pathlib import Path

from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.layout import VmLayout
from tests.backends.engine import IMAGE
from tests.backends.vm.conftest import cell_manifest, make_state
from tests.backends.vm_machines import require_qemu
from tests.conftest import Cli


def _manifest(tmp_path: Path) -> Path:
    return cell_manifest(tmp_path, "vmbox")


def _left(vm: Path) -> dict[str, list[str]]:
    """What is left in each folder that holds a cell's, volume's or snapshot's bytes."""
    parts = ("cells", "volumes", "checkpoints", "layers", "machines")
    return {part: names for part in parts
            if (names := sorted(os.listdir(vm / part)) if (vm / part).exists() else [])}


def _counter(cli: Cli) -> int:
    result = cli("exec", "vmbox", "--", "cat", "/tmp/counter", timeout=300)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def _ssh_to_the_machine(cli: Cli, tmp_path: Path) -> None:
    """OpenSSH's client runs commands in a vm cell through the same ProxyCommand, before the
    machine sleeps (the stream ports then come back with the wake: test_ssh.py covers the
    rest of what ssh does on a vm cell)."""
    import shutil

    if shutil.which("ssh") is None:
        return
    config = tmp_path / "ssh_config"
    config.write_text(cli("ssh-config", "vmbox").stdout)
    ran = subprocess.run(["ssh", "-F", str(config), "vmbox.devcell",
                          "echo hi-$((1+2)); pwd; uname -n; exit 3"], capture_output=True,
                         text=True, timeout=300, input="")
    assert ran.returncode == 3, ran.stderr
    assert ran.stdout == "hi-3\n/workspace\nvmbox\n"
    piped = subprocess.run(["ssh", "-F", str(config), "vmbox.devcell", "wc -c"],
                           capture_output=True, text=True, timeout=300, input="x" * 100000)
    assert piped.returncode == 0 and piped.stdout.strip() == "100000", piped.stderr


def test_sleep_keeps_the_machine_and_start_resumes_its_processes(
        cli: Cli, tmp_path: Path, state_dir: Path, vm_cache: Path) -> None:
    make_state(state_dir, vm_cache)
    try:
        applied = cli("apply", "-f", str(_manifest(tmp_path)), timeout=300)
        assert applied.returncode == 0, applied.stderr
        failed = cli("exec", "vmbox", "--", "sh", "-c", "echo out; echo err >&2; exit 42",
                     timeout=300)
        assert (failed.returncode, failed.stdout, failed.stderr) == (42, "out\n", "err\n")
        _ssh_to_the_machine(cli, tmp_path)
        before = _counter(cli)
        assert cli("cell", "sleep", "vmbox").returncode == 0
        assert not vm_proc.scan(VmLayout(state_dir).name_prefix)  # no QEMU while asleep
        described = cli("describe", "cell", "vmbox").stdout
        assert "consistency machine" in described and "qemu-microvm" in described
        assert ("TCG (emulated" in described) != ("KVM (hardware" in described), described
        assert cli("cell", "start", "vmbox").returncode == 0
        after = _counter(cli)
        assert before <= after < before + 30, (before, after)
        # An exec outlives a snapshot's freeze between two of its polls (the frozen agent's
        # refusals are asked again).
        short: list[subprocess.CompletedProcess[str]] = []
        runner = threading.Thread(target=lambda: short.append(
            cli("exec", "vmbox", "--", "sh", "-c", "sleep 4; echo done", timeout=300)))
        runner.start()
        time.sleep(1.5)
        frozen = cli("snapshot", "create", "vmbox", "--name", "during", timeout=300)
        assert frozen.returncode == 0, frozen.stderr
        runner.join(timeout=120)
        assert short and (short[0].returncode, short[0].stdout) == (0, "done\n"), short
        assert cli("delete", "snapshot", "during", timeout=300).returncode == 0
        # A long exec keeps no other command of the machine waiting (the agent is taken in
        # turns, one exchange at a time), and one that a sleep cuts off says so.
        long: list[subprocess.CompletedProcess[str]] = []
        runner = threading.Thread(target=lambda: long.append(
            cli("exec", "vmbox", "--", "sh", "-c", "sleep 60; echo late", timeout=300)))
        runner.start()
        time.sleep(3)  # it runs in the guest
        began = time.monotonic()
        assert _counter(cli) >= after
        assert time.monotonic() - began < 20
        assert cli("cell", "sleep", "vmbox", timeout=300).returncode == 0
        runner.join(timeout=120)
        assert long and long[0].returncode != 0, long
        assert "no longer running" in long[0].stderr, long[0].stderr
        assert "Traceback" not in long[0].stderr
        assert cli("cell", "start", "vmbox", timeout=300).returncode == 0
        assert "resumed from the saved machine" in cli("describe", "cell", "vmbox").stdout
        # A snapshot that keeps memory, and a fork of it: the same processes, a new machine.
        assert cli("exec", "vmbox", "--", "sh", "-c", "echo warm > /workspace/w.txt",
                   timeout=300).returncode == 0
        taken = cli("snapshot", "create", "vmbox", "--name", "warm", "--consistency", "machine",
                    timeout=300)
        assert taken.returncode == 0, taken.stderr
        assert "machine" in cli("get", "snapshots").stdout
        forked = cli("cell", "fork", "vmbox", "--snapshot", "warm", "--name", "vmbox-2",
                     timeout=300)
        assert forked.returncode == 0, forked.stderr
        done = cli("exec", "vmbox-2", "--", "sh", "-c", "hostname; cat /tmp/counter",
                   timeout=300)
        assert done.returncode == 0 and done.stdout.splitlines()[0] == "vmbox-2"
        assert int(done.stdout.splitlines()[1]) >= after
        described = cli("describe", "cell", "vmbox-2").stdout
        assert "resumed from a machine snapshot as a new machine (hostname vmbox-2" in described
        mac = cli("exec", "vmbox-2", "--", "cat", "/sys/class/net/eth0/address").stdout.strip()
        assert re.fullmatch(r"52:54:00(:[0-9a-f]{2}){3}", mac) and f"MAC {mac}, " in described
        assert cli("exec", "vmbox", "--", "cat", "/sys/class/net/eth0/address"
                   ).stdout.strip() != mac
        # Not exported: no archive carries memory, and its disk alone lacks the write above
        # (switched while paused, not frozen, so w.txt is still only in the guest's memory).
        archive = tmp_path / "warm.tar"
        refused = cli("snapshot", "export", "warm", "-o", str(archive), timeout=300)
        assert refused.returncode == 1 and "keeps a machine's memory" in refused.stderr
        assert "Traceback" not in refused.stderr and not archive.exists()
        assert list(tmp_path.glob(".warm.tar*")) == []
        deleted = cli("delete", "cell", "vmbox", "vmbox-2", "--approve")
        assert deleted.returncode == 0, deleted.stderr
        assert not vm_proc.scan(VmLayout(state_dir).name_prefix)
        assert not list((state_dir / "vm" / "cells").iterdir())
        # The machine snapshot (its RAM, device state and frozen disk layer) and the sleep's
        # saved machine go too: after every snapshot and cell, nothing is left.
        gone = cli("delete", "snapshot", "warm", timeout=300)
        assert gone.returncode == 0, gone.stderr
        assert _left(state_dir / "vm") == {}
    finally:
        from tests.backends.vm_machines import kill_machines

        kill_machines(state_dir)


def test_build_base_also_prepares_the_vm_root_disk_and_kernel(cli: Cli, state_dir: Path
                                                              ) -> None:
    require_qemu()
    for _ in range(2):  # idempotent
        built = cli("image", "build-base", timeout=300)
        assert built.returncode == 0, built.stderr
        assert f"vm/{IMAGE} ready (" in built.stdout
        assert "kernel " in built.stdout and ("TCG" in built.stdout or "KVM" in built.stdout)
    layout = VmLayout(state_dir)
    assert [p.name for p in layout.images.iterdir()] and [p.name for p in layout.boot.iterdir()]
    assert (layout.root.stat().st_mode & 0o077) == 0


def _cell(tmp_path: Path, name: str, extra: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: {name}}}
        spec:
          backend: vm
          image: {IMAGE}
          network: {{mode: none}}
          resources: {{memory: 128Mi}}
          workspace: {{mountPath: /workspace{extra}}}
        """))
    return path


def test_snapshot_fork_wide_views_delete_and_gc_of_a_vm_cell_through_the_cli(
        cli: Cli, tmp_path: Path, state_dir: Path, vm_cache: Path) -> None:
    make_state(state_dir, vm_cache)
    vm = state_dir / "vm"
    try:
        assert cli("apply", "-f", str(_cell(tmp_path, "vmsrc")), timeout=300).returncode == 0
        wrote = cli("exec", "vmsrc", "--", "sh", "-c", "echo before > /workspace/b.txt",
                    timeout=300)
        assert wrote.returncode == 0, wrote.stderr
        taken = cli("snapshot", "create", "vmsrc", "--name", "s1", timeout=300)
        assert taken.returncode == 0, taken.stderr
        assert cli("exec", "vmsrc", "--", "sh", "-c", "echo after > /workspace/a.txt",
                   timeout=300).returncode == 0
        fork = _cell(tmp_path, "vmfork", ", from: {snapshot: s1}")
        assert cli("apply", "-f", str(fork), timeout=300).returncode == 0
        seen = cli("exec", "vmfork", "--", "sh", "-c",
                   "cat /workspace/b.txt; test -e /workspace/a.txt || echo absent", timeout=300)
        assert seen.stdout == "before\nabsent\n", seen.stderr
        wide = cli("get", "snapshots", "-o", "wide")
        assert wide.returncode == 0 and "s1" in wide.stdout, wide.stderr
        cells = cli("get", "cells", "-o", "wide")
        assert cells.returncode == 0 and "vmfork" in cells.stdout, cells.stderr
        header, row = cells.stdout.splitlines()[:2]
        at = header.index("WORKSPACE")  # measured, not missing (later columns may be empty)
        assert not row[at:at + len("WORKSPACE")].strip().startswith("<none>"), cells.stdout
        layers = [str(p) for p in (vm / "layers").glob("*.qcow2")]
        # Every layer once (its qcow2 and its record): the source's top, the fork's top, the
        # snapshot's frozen layer; with the volumes' and the checkpoint's markers.
        held = [*layers, *(str(p) for p in (vm / "layers").glob("*.json")),
                *(str(p) for part in ("volumes", "checkpoints") for p in (vm / part).iterdir())]

        def du() -> int:
            return int(subprocess.run(["du", "-scx", "-B1", *held], capture_output=True,
                                      text=True, check=True).stdout.splitlines()[-1].split()[0])

        # The two guests run on (their journals write every few seconds) and a layer's
        # blocks only ever grow, so df's figure lies between `du` just before and just after.
        before = du()
        df = cli("df", "-v", "-o", "json")
        after = du()
        assert df.returncode == 0, df.stderr
        doc = json.loads(df.stdout)
        sizes = {t["type"]: t["sizeBytes"] for t in doc["types"]}
        assert len(layers) == 3
        assert before <= sizes["Workspaces"] + sizes["Fork layers"] + sizes["Checkpoints"] \
            <= after, (before, sizes, after)
        items = {(i["type"], i["backend"]) for i in doc["items"]}
        assert {("Workspaces", "vm"), ("Fork layers", "vm"), ("Checkpoints", "vm"),
                ("Runtimes", "vm")} <= items
        exported = cli("snapshot", "export", "s1", "-o", str(tmp_path / "s1.tar"), timeout=300)
        assert exported.returncode == 0, exported.stderr
        listed = subprocess.run(["tar", "tf", str(tmp_path / "s1.tar")], capture_output=True,
                                text=True, check=True).stdout
        assert "workspace/b.txt" in listed and "workspace/a.txt" not in listed
        # A cell moves between machines: import into another state directory, fork there.
        other = make_state(tmp_path / "other", vm_cache)
        there = {"DEVCELL_HOME": str(other)}
        imported = cli("snapshot", "import", str(tmp_path / "s1.tar"), env=there, timeout=300)
        assert imported.returncode == 0, imported.stderr
        assert "imported (1 file, 7 bytes, backend vm" in imported.stdout, imported.stdout
        # With only an imported vm snapshot there (no vm cell recorded), df still sees its
        # checkpoint: the registry's roots say which backends hold something, not the cells.
        alone = cli("df", "-v", "-o", "json", env=there)
        assert alone.returncode == 0, alone.stderr
        assert any(i["type"] == "Checkpoints" and i["backend"] == "vm" and i["sizeBytes"] > 0
                   for i in json.loads(alone.stdout)["items"]), alone.stdout
        moved = _cell(tmp_path, "moved", ", from: {snapshot: s1}")
        assert cli("apply", "-f", str(moved), env=there, timeout=300).returncode == 0
        read = cli("exec", "moved", "--", "sh", "-c",
                   "cat /workspace/b.txt; test -e /workspace/a.txt || echo absent",
                   env=there, timeout=300)
        assert read.stdout == "before\nabsent\n", read.stderr
        for gone_there in (("cell", "moved", "--approve"), ("snapshot", "s1")):
            assert cli("delete", *gone_there, env=there, timeout=300).returncode == 0
        assert _left(other / "vm") == {}
        for kind, name in (("cell", "vmsrc"), ("cell", "vmfork"), ("snapshot", "s1")):
            gone = cli("delete", kind, name, "--approve", timeout=300)
            assert gone.returncode == 0, gone.stderr
        assert cli("gc", "--approve", timeout=300).returncode == 0
        assert _left(vm) == {}
    finally:
        from tests.backends.vm_machines import kill_machines

        kill_machines(state_dir)
        kill_machines(tmp_path / "other")
