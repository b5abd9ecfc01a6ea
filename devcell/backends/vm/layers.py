"""qcow2 layers: the vm backend's workspace disks as chains, so a snapshot costs only the blocks
written since the previous one and a fork costs nothing up front.

Every workspace disk is a chain of qcow2 files in `<state>/vm/layers/`, each `<id>.qcow2`
with `<id>.json` beside it (its parent, the volume that made it). The chain's top is the
volume's writable disk; every layer below it is frozen. A disk snapshot freezes the top (QEMU
`blockdev-snapshot-sync` on a running machine, with the guest's filesystems frozen through its
agent; `qemu-img create` on a stopped one) and puts a new empty top over it: the frozen layer
holds exactly the blocks written since the previous snapshot. A fork is a new empty top on the
snapshot's layer. Every image is opened with its format given (`-F qcow2`, never probed), so
what a guest writes into a disk can never make QEMU read another file.

Who needs a layer is read from the markers, never assumed: a volume's top, a checkpoint's
layer, and every layer below them. `collect` removes layers nothing needs and merges a layer
no snapshot stands on into its only child (`qemu-img commit` of the child when it is smaller,
then renamed over it; otherwise `qemu-img rebase` of the child: the child's view never
changes, and a crash between steps leaves a valid chain). A layer with two children (two
forks) stays: merging it would copy it twice. A layer open by a running machine is never
written by qemu-img (QEMU's image lock refuses it; the merge waits for the next collect).
Chains are kept at most `max_depth` layers deep: past it the top is flattened (QEMU
`block-stream`, or `qemu-img rebase -b ""`), which costs one full copy every `max_depth`
snapshots.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcell.backends.host import children
from devcell.backends.host.ids import is_safe_id
from devcell.errors import BackendError
from devcell.log import logger

SUFFIX = ".qcow2"
DEFAULT_MAX_DEPTH = 8
LOCK = "layers.lock"
"""Beside the layers directory (which holds only layers), owner-only, never removed."""
STALE_TEMP_SECONDS = 600
INSTALL = "apt-get install -y qemu-utils"


@dataclass(frozen=True)
class Layer:
    id: str
    parent: str | None
    volume: str | None


def new_id() -> str:
    return f"lay{secrets.token_hex(8)}"


def max_depth_from_env() -> int:
    raw = os.environ.get("DEVCELL_VM_MAX_CHAIN", "")
    return int(raw) if raw.isdigit() and int(raw) >= 1 else DEFAULT_MAX_DEPTH


def qemu_img(args: list[str]) -> str:
    if shutil.which("qemu-img") is None:
        raise BackendError(f"qemu-img is not installed; install it: {INSTALL}")
    done = children.run(["qemu-img", *args])
    if done.returncode != 0:
        raise BackendError(f"qemu-img {args[0]} failed: {done.stderr.strip()[-300:]}")
    return done.stdout


def allocated(path: Path) -> int:
    """Bytes the file holds on disk (as `du`; qemu-img's actual-size)."""
    try:
        return os.lstat(path).st_blocks * 512
    except OSError:
        return 0


class LayerStore:
    def __init__(self, directory: Path, *, max_depth: int | None = None) -> None:
        self.directory = directory
        self.max_depth = max_depth if max_depth is not None else max_depth_from_env()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        fd = os.open(self.directory.parent / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, mode)
            yield
        finally:
            os.close(fd)

    def making(self) -> contextlib.AbstractContextManager[None]:
        """Held (shared) from a layer's record until a marker names it: a collect in another
        process, which holds it exclusively, would otherwise remove a layer being made."""
        return self._locked(fcntl.LOCK_SH)

    def path(self, layer_id: str) -> Path:
        if not is_safe_id(layer_id):
            raise BackendError(f"layer id {layer_id!r} is not one DevCell made")
        return self.directory / f"{layer_id}{SUFFIX}"

    def _meta_path(self, layer_id: str) -> Path:
        return self.path(layer_id).with_suffix(".json")

    def get(self, layer_id: str) -> Layer | None:
        try:
            raw = json.loads(self._meta_path(layer_id).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(raw, dict):
            return None
        parent = raw.get("parent")
        return Layer(layer_id, parent if isinstance(parent, str) and is_safe_id(parent)
                     else None, raw.get("volume"))

    def exists(self, layer_id: str) -> bool:
        return self.get(layer_id) is not None and self.path(layer_id).is_file()

    def _record(self, layer_id: str, parent: str | None, volume: str | None) -> None:
        target = self._meta_path(layer_id)
        tmp = target.with_name(f".{target.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"parent": parent, "volume": volume, "created": time.time()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    def all(self) -> dict[str, Layer]:
        out: dict[str, Layer] = {}
        for entry in os.listdir(self.directory):
            if entry.endswith(".json") and not entry.startswith("."):
                layer = self.get(entry.removesuffix(".json"))
                if layer is not None:
                    out[layer.id] = layer
        return out

    def chain(self, layer_id: str) -> list[str]:
        """The layer and every layer below it, top first."""
        out: list[str] = []
        current: str | None = layer_id
        while current is not None and current not in out:
            out.append(current)
            layer = self.get(current)
            current = layer.parent if layer else None
        return out

    def depth(self, layer_id: str) -> int:
        return len(self.chain(layer_id))

    # -- making layers ---------------------------------------------------------------------

    def from_raw(self, raw: Path, *, volume: str | None) -> str:
        """A bottom layer holding a raw disk's data (sparse: only its allocated blocks)."""
        layer_id = new_id()
        self._record(layer_id, None, volume)
        tmp = self.directory / f".{layer_id}.tmp{SUFFIX}"
        qemu_img(["convert", "-q", "-f", "raw", "-O", "qcow2", str(raw), str(tmp)])
        os.chmod(tmp, 0o600)
        os.rename(tmp, self.path(layer_id))
        return layer_id

    def prepare_overlay(self, parent: str, *, volume: str | None) -> str:
        """Record a new layer over `parent` (its file is made by `overlay` or by QEMU)."""
        layer_id = new_id()
        self._record(layer_id, parent, volume)
        return layer_id

    def overlay(self, layer_id: str) -> None:
        """Write the empty qcow2 file of a recorded layer over its parent (a stopped disk)."""
        layer = self.get(layer_id)
        if layer is None or layer.parent is None:
            raise BackendError(f"layer {layer_id} has no parent to stand on")
        tmp = self.directory / f".{layer_id}.tmp{SUFFIX}"
        qemu_img(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b",
                  str(self.path(layer.parent)), str(tmp)])
        os.chmod(tmp, 0o600)
        os.rename(tmp, self.path(layer_id))

    def forget(self, layer_id: str) -> None:
        for path in (self.path(layer_id), self._meta_path(layer_id)):
            path.unlink(missing_ok=True)

    # -- flattening and merging ------------------------------------------------------------

    def needs_flattening(self, layer_id: str) -> bool:
        return self.depth(layer_id) > self.max_depth

    def flatten_stopped(self, layer_id: str) -> None:
        """Copy everything below into the layer, which then stands alone."""
        qemu_img(["rebase", "-q", "-f", "qcow2", "-b", "", str(self.path(layer_id))])
        self.set_parent(layer_id, None)

    def set_parent(self, layer_id: str, parent: str | None) -> None:
        layer = self.get(layer_id)
        self._record(layer_id, parent, layer.volume if layer else None)

    def collect(self, needed: Callable[[], Iterable[str]],
                busy: Callable[[], Iterable[str]] = tuple) -> dict[str, int]:
        """Remove what nothing needs, merge what no snapshot stands on; counts of each.
        `needed()` (the layers markers name) and `busy()` (tops of running machines: QEMU has
        their whole chains open, nothing under them is written here) are read under the
        lock, after any layer being made is named by its marker."""
        with self._locked(fcntl.LOCK_EX):
            roots = {layer_id for layer_id in needed() if is_safe_id(layer_id)}
            return self._collect(roots, {layer for top in busy() for layer in self.chain(top)})

    def _collect(self, roots: set[str], running: set[str]) -> dict[str, int]:
        layers = self.all()
        live: set[str] = set()
        for root in roots:
            live.update(self.chain(root))
        removed = merged = 0
        for layer_id in sorted(set(layers) - live):
            self.forget(layer_id)
            removed += 1
        self._remove_strays(set(layers))
        children_of: dict[str, list[str]] = {}
        for layer_id in live:
            layer = self.get(layer_id)
            if layer is not None and layer.parent is not None:
                children_of.setdefault(layer.parent, []).append(layer_id)
        for layer_id in sorted(live - roots):
            kids = children_of.get(layer_id, [])
            if len(kids) == 1 and kids[0] not in running and layer_id not in running \
                    and self._merge(layer_id, kids[0], children_of):
                merged += 1
        return {"removed": removed, "merged": merged}

    def _remove_strays(self, known: set[str]) -> None:
        """qcow2 files with no record and temporaries a crash left (no one makes a layer
        while collect holds the lock, so none is in the making); only names DevCell makes."""
        for entry in os.listdir(self.directory):
            name = entry.removeprefix(".").removesuffix(SUFFIX).removesuffix(".tmp")
            if not (entry.endswith(SUFFIX) and name.startswith("lay") and is_safe_id(name)):
                continue
            if entry.startswith(".") or name not in known:
                (self.directory / entry).unlink(missing_ok=True)

    def _merge(self, layer_id: str, child: str, children_of: dict[str, list[str]]) -> bool:
        """Fold `layer_id` (no snapshot on it, one child) into `child`; False when the child
        is open by a running machine (its image lock refuses qemu-img)."""
        layer = self.get(layer_id)
        if layer is None or not self._backed_by(child, layer_id):
            return False
        parent = layer.parent
        try:
            if allocated(self.path(child)) <= allocated(self.path(layer_id)):
                # Cheaper: write the child's blocks into the layer, then the layer becomes it.
                qemu_img(["commit", "-q", "-d", "-f", "qcow2", str(self.path(child))])
                self._record(layer_id, parent, layer.volume)
                os.replace(self.path(layer_id), self.path(child))
                self.set_parent(child, parent)
                self._meta_path(layer_id).unlink(missing_ok=True)
            else:
                base = str(self.path(parent)) if parent else ""
                qemu_img(["rebase", "-q", "-f", "qcow2", *(["-F", "qcow2"] if parent else []),
                          "-b", base, str(self.path(child))])
                self.set_parent(child, parent)
                self.forget(layer_id)
        except BackendError as exc:
            logger.bind(layer=layer_id, child=child).info("merge deferred: {}", exc)
            return False
        if parent is not None:
            siblings = children_of.setdefault(parent, [])
            siblings[:] = [c for c in siblings if c != layer_id] + [child]
        children_of.pop(layer_id, None)
        return True

    def _backed_by(self, child: str, layer_id: str) -> bool:
        """Whether the child's own header names the layer as its backing file (the record
        and the image agree: never merge on the record alone)."""
        try:
            found = info(self.path(child)).get("backing-filename")
        except (BackendError, ValueError):
            return False
        return found == str(self.path(layer_id))

    # -- measuring -------------------------------------------------------------------------

    def sizes(self, layer_ids: Iterable[str]) -> int:
        return sum(allocated(self.path(layer_id)) for layer_id in set(layer_ids))

    def view_bytes(self, layer_id: str) -> int:
        """Bytes of the disk that hold data as the guest sees it through the whole chain
        (`qemu-img map`): a disk's apparent size; 0 when qemu-img cannot tell."""
        return self._mapped(layer_id, own=False) or 0

    def written(self, layer_id: str) -> int | None:
        """Bytes of guest blocks the layer holds itself (not qcow2's own tables): what was
        written since the layer below was frozen. None when qemu-img cannot tell."""
        return self._mapped(layer_id, own=True)

    def _mapped(self, layer_id: str, *, own: bool) -> int | None:
        """-U: the layer may be open by a running machine."""
        try:
            extents = json.loads(qemu_img(["map", "-U", "--output=json", "-f", "qcow2",
                                           str(self.path(layer_id))]))
        except (BackendError, ValueError):
            return None
        if not isinstance(extents, list):
            return None
        return sum(int(e.get("length", 0)) for e in extents if isinstance(e, dict)
                   and (e.get("depth") == 0 or not own)
                   and (e.get("data") or (own and e.get("zero") and e.get("present", True))))

    def has_data(self, layer_id: str) -> bool:
        written = self.written(layer_id)
        return written is None or written > 0


def each_needed(*groups: Iterable[str | None]) -> list[str]:
    return [item for group in groups for item in group if item]


Switch = Callable[[Path], None]
"""Make the volume's new top at the given path over its current top, with the machine that
runs on it (QEMU `blockdev-snapshot-sync`)."""


def info(path: Path) -> dict[str, Any]:
    """`qemu-img info` of one layer as JSON (-U: it may be open by a running machine)."""
    out = qemu_img(["info", "-U", "--output=json", "-f", "qcow2", str(path)])
    value = json.loads(out)
    return value if isinstance(value, dict) else {}
