"""Fixtures for the vm backend's tests: real QEMU under TCG (no mocks), one booted machine
shared per module, every machine a test starts killed afterwards by its label only."""

from __future__ import annotations

import contextlib
import io
import os
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.base import CellRef
from devcell.backends.vm.backend import VmBackend
from tests.backends.engine import IMAGE
from tests.backends.vm_machines import kill_machines, require_qemu, seed_images

# The cross-check of DevCell's Firecracker contract against upstream's own description is a
# maintainer's run (it reads a copy of upstream's file named by this variable): not collected
# without it, rather than reported as thirteen skipped tests on every run.
collect_ignore = [] if os.environ.get("DEVCELL_FIRECRACKER_SWAGGER") else [
    "test_firecracker_contract.py"]

COUNTER = ("i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; "
           "mv /tmp/counter.new /tmp/counter; sleep 0.2; done")
"""A process whose state is its count; the rename makes every read see a whole number."""
SPEC: dict[str, Any] = {
    "backend": "vm", "image": IMAGE, "state": "Running",
    "workspace": {"mountPath": "/workspace"},
    "env": [{"name": "GREETING", "value": "hello vm"},
            {"name": "TOKEN", "value": "canary-vm-5e1d", "secret": True}],
    "services": [{"name": "counter", "command": ["sh", "-c", COUNTER]}],
}


def cell_manifest(tmp_path: Path, name: str, *, counter: bool = True) -> Path:
    """A 128 MiB vm Cell named `name` without network, as a user writes it (with the
    counter service unless told not to), in `tmp_path/cell.yaml`."""
    services = ("  services:\n    - name: counter\n"
                f"      command: [sh, -c, \"{COUNTER}\"]\n") if counter else ""
    path = tmp_path / "cell.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: {name}}}
        spec:
          backend: vm
          image: {IMAGE}
          network: {{mode: none}}
          workspace: {{mountPath: /workspace}}
          resources: {{memory: 128Mi}}
        """) + services)
    return path


@pytest.fixture(scope="session")
def vm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vm-images")


def make_state(path: Path, cache: Path) -> Path:
    require_qemu()
    seed_images(path, cache)
    return path


@contextlib.contextmanager
def booted_cell(state: Path, cache: Path, ref: CellRef, *, max_chain: int | None = None
                ) -> Iterator[VmBackend]:
    """A vm backend over a fresh state directory with `ref` created on its own workspace
    volume and started, its counter service (when it has one) counting; every machine
    started under `state` is killed on the way out."""
    backend = VmBackend(state_dir=make_state(state, cache), max_chain=max_chain)
    try:
        backend.create_volume(ref, ref.volume_id or "", from_checkpoint=None)
        backend.create(ref, "hash-1")
        backend.start(ref)
        if any(s.get("name") == "counter" for s in ref.spec.get("services") or []):
            _counting(backend, ref)
        yield backend
    finally:
        kill_machines(state)


def _counting(backend: VmBackend, ref: CellRef) -> None:
    """Wait for the counter's first count: a command through the stream helper answers as
    soon as the guest is up, which can be before the supervisor has started the services."""
    deadline = time.monotonic() + 120
    while run(backend, ref, "test -s /tmp/counter")[0] != 0:
        assert time.monotonic() < deadline, "the counter service never counted"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory, vm_cache: Path
            ) -> Iterator[tuple[VmBackend, CellRef]]:
    """A booted vm cell with a workspace disk and the counter service, for the module."""
    ref = CellRef("cell_vmtest0001", "box", SPEC, "vol_vmtest0001")
    with booted_cell(tmp_path_factory.mktemp("vm") / "state", vm_cache, ref) as backend:
        yield backend, ref


def run(backend: VmBackend, ref: CellRef, script: str, stdin: bytes | None = None
        ) -> tuple[int, str, str]:
    out, err = io.BytesIO(), io.BytesIO()
    code = backend.exec(ref, ["sh", "-c", script], stdout=out, stderr=err,
                        stdin=io.BytesIO(stdin) if stdin is not None else None)
    return code, out.getvalue().decode(), err.getvalue().decode()
