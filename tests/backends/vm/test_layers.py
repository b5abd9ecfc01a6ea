"""qcow2 layer chains (vm/layers.py) with real qemu-img and qemu-io, no machine: what is
removed, what is merged and which way, what is never touched, and that every merge keeps
each remaining image's contents byte for byte (`qemu-img compare`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from devcell.backends.vm.layers import LayerStore
from tests.backends.engine import in_ci

_MISSING = shutil.which("qemu-img") is None or shutil.which("qemu-io") is None
if _MISSING and in_ci():
    pytest.fail("CI needs qemu-img and qemu-io (qemu-utils; scripts/vm-setup)", pytrace=False)
pytestmark = pytest.mark.skipif(_MISSING, reason="qemu-utils is not installed")


def write(store: LayerStore, layer: str, offset_kib: int, size_kib: int, byte: int) -> None:
    subprocess.run(["qemu-io", "-f", "qcow2", "-c",
                    f"write -P {byte} {offset_kib}k {size_kib}k", str(store.path(layer))],
                   check=True, capture_output=True)


def flat(store: LayerStore, layer: str, into: Path) -> Path:
    """The layer's whole view as one raw image, to compare before and after."""
    subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw",
                    str(store.path(layer)), str(into)], check=True)
    return into


def same(a: Path, b: Path) -> bool:
    return subprocess.run(["qemu-img", "compare", "-f", "raw", "-F", "raw", str(a), str(b)],
                          capture_output=True).returncode == 0


def base(tmp_path: Path, store: LayerStore) -> str:
    raw = tmp_path / "disk.raw"
    with open(raw, "wb") as f:
        f.truncate(8 << 20)
    layer = store.from_raw(raw, volume="vol_a")
    write(store, layer, 0, 4096, 0x11)
    return layer


def over(store: LayerStore, parent: str) -> str:
    layer = store.prepare_overlay(parent, volume="vol_a")
    store.overlay(layer)
    return layer


def test_a_layer_no_snapshot_needs_is_merged_into_its_only_child_both_ways(
        tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers", max_depth=8)
    bottom = base(tmp_path, store)
    middle = over(store, bottom)
    write(store, middle, 512, 64, 0x22)  # smaller than its child: the child is rebased
    top = over(store, middle)
    write(store, top, 1024, 2048, 0x33)  # a top bigger than the middle, smaller than the bottom
    before = flat(store, top, tmp_path / "before.raw")
    top_inode = os.stat(store.path(top)).st_ino
    assert store.collect(lambda: [top, bottom]) == {"removed": 0, "merged": 1}
    assert os.stat(store.path(top)).st_ino == top_inode  # rebased in place
    assert store.chain(top) == [top, bottom] and not store.path(middle).exists()
    assert same(before, flat(store, top, tmp_path / "after.raw"))
    # Now the bottom is no snapshot's: the top, smaller, is committed into it, and the merged
    # file takes the top's name.
    bottom_inode = os.stat(store.path(bottom)).st_ino
    assert store.collect(lambda: [top]) == {"removed": 0, "merged": 1}
    assert store.chain(top) == [top] and not store.path(bottom).exists()
    assert os.stat(store.path(top)).st_ino == bottom_inode  # committed, renamed over
    assert same(before, flat(store, top, tmp_path / "after2.raw"))
    assert sorted(p.name for p in (tmp_path / "layers").iterdir()) == \
        [f"{top}.json", f"{top}.qcow2"]


def test_a_layer_two_forks_stand_on_is_kept_and_nothing_needed_is_removed(
        tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers", max_depth=8)
    shared = base(tmp_path, store)
    one, two = over(store, shared), over(store, shared)
    write(store, one, 0, 64, 0x44)
    gone = over(store, two)
    views = {layer: flat(store, layer, tmp_path / f"{layer}.raw") for layer in (one, two)}
    assert store.collect(lambda: [one, two]) == {"removed": 1, "merged": 0}
    assert not store.path(gone).exists() and store.path(shared).exists()
    for layer, view in views.items():
        assert same(view, flat(store, layer, tmp_path / f"{layer}-after.raw"))


def test_nothing_under_a_running_top_is_written(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers", max_depth=8)
    bottom = base(tmp_path, store)
    middle = over(store, bottom)
    top = over(store, middle)
    assert store.collect(lambda: [top], lambda: [top]) == {"removed": 0, "merged": 0}
    assert store.chain(top) == [top, middle, bottom]


def test_a_record_that_disagrees_with_the_image_header_is_never_merged(
        tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers", max_depth=8)
    bottom = base(tmp_path, store)
    middle = over(store, bottom)
    top = over(store, bottom)  # the image stands on the bottom ...
    store.set_parent(top, middle)  # ... the record says the middle
    assert store.collect(lambda: [top, bottom]) == {"removed": 0, "merged": 0}
    assert store.path(middle).exists()


def test_flattening_past_the_bound_keeps_the_view_and_stands_alone(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers", max_depth=2)
    bottom = base(tmp_path, store)
    top = over(store, over(store, bottom))
    write(store, top, 4096, 64, 0x55)
    assert store.needs_flattening(top)
    before = flat(store, top, tmp_path / "before.raw")
    store.flatten_stopped(top)
    assert store.chain(top) == [top] and not store.needs_flattening(top)
    assert same(before, flat(store, top, tmp_path / "after.raw"))


def test_a_collect_waits_for_a_layer_being_made_and_removes_what_a_crash_left(
        tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers", max_depth=8)
    bottom = base(tmp_path, store)
    stray = tmp_path / "layers" / ".lay0123456789abcdef.tmp.qcow2"  # a killed convert's
    stray.write_bytes(b"partial")
    named: list[str] = [bottom]  # what the markers name, read when the collect runs
    done = threading.Event()
    worker = threading.Thread(target=lambda: (store.collect(lambda: list(named)), done.set()))
    with store.making():
        fresh = over(store, bottom)  # recorded, not yet named by a marker
        worker.start()
        assert not done.wait(1.0)  # the collect waits for the maker ...
        named.append(fresh)  # ... which names its layer before it lets go
    worker.join(30)
    assert done.is_set() and store.exists(fresh) and store.exists(bottom)
    assert not stray.exists()
