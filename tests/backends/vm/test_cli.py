"""A vm cell driven through the CLI as a user drives it: apply, exec, sleep, start, delete."""

from __future__ import annotations

import textwrap
from pathlib import Path

from devcell.backends import vm_proc
from devcell.backends.vm_layout import VmLayout
from tests.backends.engine import IMAGE
from tests.backends.vm.conftest import COUNTER, make_state
from tests.backends.vm_machines import require_qemu
from tests.conftest import Cli


def _manifest(tmp_path: Path) -> Path:
    path = tmp_path / "cell.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: vmbox}}
        spec:
          backend: vm
          image: {IMAGE}
          network: {{mode: none}}
          workspace: {{mountPath: /workspace}}
          resources: {{memory: 128Mi}}
          services:
            - name: counter
              command: [sh, -c, "{COUNTER}"]
        """))
    return path


def _counter(cli: Cli) -> int:
    result = cli("exec", "vmbox", "--", "cat", "/tmp/counter", timeout=300)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def test_sleep_keeps_the_machine_and_start_resumes_its_processes(
        cli: Cli, tmp_path: Path, state_dir: Path, vm_cache: Path) -> None:
    make_state(state_dir, vm_cache)
    try:
        applied = cli("apply", "-f", str(_manifest(tmp_path)), timeout=300)
        assert applied.returncode == 0, applied.stderr
        failed = cli("exec", "vmbox", "--", "sh", "-c", "echo out; echo err >&2; exit 42",
                     timeout=300)
        assert (failed.returncode, failed.stdout, failed.stderr) == (42, "out\n", "err\n")
        before = _counter(cli)
        assert cli("cell", "sleep", "vmbox").returncode == 0
        assert not vm_proc.scan(VmLayout(state_dir).name_prefix)  # no QEMU while asleep
        described = cli("describe", "cell", "vmbox").stdout
        assert "consistency machine" in described and "qemu-microvm" in described
        assert cli("cell", "start", "vmbox").returncode == 0
        after = _counter(cli)
        assert before <= after < before + 30, (before, after)
        assert "resumed from the saved machine" in cli("describe", "cell", "vmbox").stdout
        # A snapshot that keeps memory, and a fork of it: the same processes, a new machine.
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
        assert "resumed from a machine snapshot as a new machine (hostname vmbox-2" in \
            cli("describe", "cell", "vmbox-2").stdout
        deleted = cli("delete", "cell", "vmbox", "vmbox-2", "--approve")
        assert deleted.returncode == 0, deleted.stderr
        assert not vm_proc.scan(VmLayout(state_dir).name_prefix)
        assert not list((state_dir / "vm" / "cells").iterdir())
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
