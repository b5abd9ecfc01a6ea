"""The Backend protocol: what a controller may ask of the machinery that runs cells.

Backends declare what they can honestly do (Capabilities); planners read the flags before
they plan, so a missing capability is a planning decision rather than a surprise mid-step.
Every method is idempotent: repeating a call that already took effect is not an error.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from devcell.records import Record, field

if TYPE_CHECKING:
    import threading
    from pathlib import Path


class Consistency(StrEnum):
    """How much of a cell a snapshot truly preserves."""

    METADATA = "metadata"  # control-plane records only; no files
    FILESYSTEM = "filesystem"  # the workspace files, taken with services quiesced
    MACHINE = "machine"  # disk and memory: processes resume where they were


class Capabilities(Record):
    """What a backend can honestly do: planners read these flags before they plan."""

    workspace_files: bool = False
    memory_state: bool = False
    block_diff: bool = False
    """Snapshots keep only the blocks written since the previous one (vm: qcow2 layers);
    informational: no controller plans differently by it."""
    exec: bool = False
    snapshot_consistency: Consistency = Consistency.METADATA
    parallel: int = 1
    """Reconciles worth running at once: >1 when calls wait on an engine rather than the CPU."""
    pulls_images: bool = False
    """The backend runs cells from registry images and pulls them (the Pulling protocol): the
    cell controller plans a `pull-image` step by spec.imagePullPolicy."""
    start_hooks: bool = False
    """The backend runs `hooks.postCreate` and `hooks.postStart` when it starts a runtime;
    a cell with them is refused on a backend without (they would be silently skipped)."""
    service_state: bool = False
    """observe reports each service's state (Observed.detail["services"]: running, crash
    loops, readiness checks), so Ready can follow it; `services[].ready` is refused without."""
    builds_images: bool = False
    """The backend builds a cell's image from spec.build (the Building protocol): the cell
    controller tags it by the build's digest and plans a `build-image` step when missing."""
    keeps_rootfs: bool = False
    """A stopped runtime keeps its root filesystem's changes (a stopped container's writable
    layer) and starts again from them: the cell controller's sleep stops the runtime instead
    of deleting it, so what was installed in the cell survives sleep and start."""


class CellRef(Record):
    """What a backend needs to know about a cell: identity, desired spec, its volume."""

    id: str
    name: str
    spec: dict[str, Any]
    volume_id: str | None = None
    op_id: str | None = None
    """The operation making this call: backends label what they create with it."""
    owner: str | None = None
    """The user the cell belongs to (metadata.owner as recorded; None: not known): whether a
    workspace's git clone may use the host's credentials (git_source.host_credentials)."""


class Observed(Record):
    """What the backend sees of a cell right now."""

    exists: bool
    running: bool = False
    frozen: bool = False
    """Quiesced for a checkpoint (e.g. docker pause) and not resumed: left so by a crash."""
    runtime_hash: str | None = None
    """Digest of the spec the running instance was created from (drift and updates)."""
    detail: dict[str, Any] = field(default_factory=dict)


class CheckpointInfo(Record):
    """A checkpoint a backend holds: where it is, what it preserves, its size."""

    ref: str
    consistency: Consistency
    size_bytes: int = 0
    files: int = 0
    node: str | None = None
    """The cluster node whose disk holds it (a cell on the swarm's); None on a single host."""

    def outputs(self) -> Outputs:
        """As a step's recorded outputs."""
        return {"checkpoint": self.ref, "consistency": str(self.consistency),
                "bytes": self.size_bytes, "files": self.files,
                **({"node": self.node} if self.node else {})}


class OwnedKind(StrEnum):
    """The kinds of resource a backend makes for a cell, and lists for the orphan sweep."""

    CELL = "cell"  # the runtime (a container; a row in the fake)
    VOLUME = "volume"
    CHECKPOINT = "checkpoint"


class Owned(Record):
    """A resource the backend holds, with the owner it was labelled with when it was made.

    `id` is the resource's own id (for a cell, the cell id). `cell_id` is the owning cell,
    read from the backend's labels or markers, never from DevCell's database: a crash between
    the backend call and the commit leaves resources the database does not know, and this is
    how the sweep finds them.
    """

    kind: OwnedKind
    id: str
    cell_id: str
    content: str | None = None
    """Where the user's files of a volume or checkpoint lie, when it holds any (a vm cell's
    machine: its directory, and that it runs): the sweep never removes such a resource on its
    own, and `devcell gc` only with approval (the fake's hold none)."""


Outputs = dict[str, str | int | float | bool | None]
"""Scalar outputs of a step, recorded in its operation."""

class Fill(Protocol):
    """Writes a new checkpoint's tree into a directory that does not exist yet (None: the
    backend keeps no files, check only), and the sidecars' data it carries into `sidecars`
    (`<name>/` each; None: checked, not kept); returns (files, bytes) of what it wrote."""

    def __call__(self, directory: Path | None, *, sidecars: Path | None = None
                 ) -> tuple[int, int]: ...


@runtime_checkable
class MachineState(Protocol):
    """What a backend with Capabilities.memory_state also does: save a running cell's whole
    machine (memory and disk) and bring it back where it was. The cell controller plans a
    sleep as save-machine, and the wake as restore-machine, only on such a backend."""

    def save_machine(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo:
        """Pause, save memory and device state beside the disk, stop the machine."""
        ...

    def restore_machine(self, cell: CellRef, checkpoint_id: str) -> Outputs:
        """Start the machine from what save_machine kept; its processes go on."""
        ...


@runtime_checkable
class MachineSnapshots(Protocol):
    """What a backend with memory state may also do: a Snapshot with `consistency: machine`
    (the snapshot controller plans one only on such a backend)."""

    def snapshot_machine(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo:
        """A checkpoint that keeps memory too (consistency machine), the cell running on; a
        cell forked from it resumes its processes as a new machine."""
        ...


class ImageState(Record):
    """What the engine holds of an image reference, and (when asked) what its registry serves.

    `current` is None when the registry was not asked (or could not answer: `check_error`
    says why), else whether the local image is the one the registry serves under that
    reference now (its digest is among the local image's repository digests).
    """

    present: bool
    image_id: str | None = None
    remote_digest: str | None = None
    current: bool | None = None
    check_error: str | None = None


@runtime_checkable
class Pulling(Protocol):
    """What a backend with Capabilities.pulls_images also does: say what it holds of an image
    and pull one with the engine's credentials (the steps the cell controller plans)."""

    def image_state(self, image: str, *, check_registry: bool) -> ImageState: ...

    def pull_image(self, cell: CellRef, image: str) -> Outputs:
        """Pull `image`, recording that DevCell pulled it (for `devcell image ls|prune`);
        ImagePullFailed with its cause when the engine cannot."""
        ...


@runtime_checkable
class Building(Protocol):
    """What a backend with Capabilities.builds_images also does: name the image a spec.build
    makes (a digest of what the build would send, so an unchanged context names the same
    image and costs no build) and build it."""

    def build_tag(self, cell: CellRef, build: dict[str, Any]) -> str:
        """The image reference the build of `build` is tagged with; ImageBuildFailed when
        the context cannot be read."""
        ...

    def image_exists(self, image: str) -> bool: ...

    def build_image(self, cell: CellRef, build: dict[str, Any], tag: str) -> Outputs:
        """Build `build` as `tag`, labelled as DevCell's; ImageBuildFailed with the failing
        step's output tail when the engine cannot."""
        ...

    def delete_built_images(self, cell: CellRef) -> Outputs:
        """Remove every image this state directory built for `cell` (found by DevCell's
        labels, never by name) that no container uses: the cell is deleted. Never forced."""
        ...


@runtime_checkable
class Supervising(Protocol):
    """What a backend that runs the cell's supervisor also does on request: run the
    postCreate hooks again (`devcell cell rerun-hooks`) and restart one service now
    (`devcell cell restart CELL SERVICE`)."""

    def rerun_hooks(self, cell: CellRef) -> Outputs:
        """postCreate, then postStart, in the running cell; a failing hook is an outcome
        (`postCreate: Failed` with its output), not an error: the cell stays up."""
        ...

    def restart_service(self, cell: CellRef, service: str) -> Outputs:
        """End the service's process; its supervisor starts it again at once."""
        ...


@runtime_checkable
class KeepsRootfs(Protocol):
    """What a backend with `keeps_rootfs` also does: carry a runtime's root filesystem into
    the runtime made again after a spec change, when it is made on the same image."""

    def keep_rootfs(self, cell: CellRef) -> Outputs:
        """Keep the (stopped) runtime's root filesystem for the next `create_from_kept`,
        or drop what was kept when the image changed; outputs `kept` and, if not, `why`."""
        ...

    def create_from_kept(self, cell: CellRef, runtime_hash: str) -> Outputs:
        """`create`, made from what `keep_rootfs` kept when that is on the cell's image."""
        ...


@runtime_checkable
class KeepsCellCaches(Protocol):
    """What a backend that keeps caches per cell in the state directory also does (the
    container backend: its build digests), so that no cache outlives its cell: forget a
    cell's when the cell is deleted, and prune those of every cell the database no longer
    has (the orphan sweep and `devcell gc` do, for deletions that found no runtime to
    delete and for crashes)."""

    def forget_cell_caches(self, cell: CellRef) -> None: ...

    def prune_cell_caches(self, live_cell_ids: frozenset[str]) -> list[str]:
        """Drop the caches of cells not in `live_cell_ids`; returns the cell names dropped."""
        ...


@runtime_checkable
class Measuring(Protocol):
    """What a backend that keeps files also does: say how many bytes removing one of its
    volumes or checkpoints would free (an inode shared by hard links with another
    checkpoint is freed only with its last link). `devcell gc` reports it."""

    def exclusive_bytes(self, kind: OwnedKind, resource_id: str) -> int: ...


class Changes(Record):
    """How a workspace differs from a checkpoint (what restoring over it would replace):
    counts of paths added, changed (type, size, mtime or mode, or another file in its place)
    and removed since, and the first few of them by name, so a user can see what would be
    lost before approving."""

    added: int = 0
    changed: int = 0
    removed: int = 0
    examples: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return self.added + self.changed + self.removed

    def summary(self) -> str:
        text = f"{self.added} added, {self.changed} changed, {self.removed} removed"
        if self.examples:
            more = self.total - len(self.examples)
            text += ": " + ", ".join(self.examples) + (f" and {more} more" if more > 0 else "")
        return text


@runtime_checkable
class Restoring(Protocol):
    """What a backend that can put a cell's workspace back to a checkpoint also does
    (`devcell snapshot restore`). The cell controller plans a restore only on such a backend;
    on any other the request is refused before anything is recorded."""

    def restore_workspace(self, cell: CellRef, checkpoint_id: str) -> Outputs:
        """Replace the cell's workspace (its runtime stopped) by the checkpoint's tree, all at
        once: a crash leaves the old workspace or the restored one, never a mix. The
        checkpoint never changes, and shares nothing the workspace can write."""
        ...

    def workspace_changes(self, volume_id: str, checkpoint_id: str | None) -> Changes:
        """What the workspace holds that the checkpoint does not (None: no checkpoint)."""
        ...


@runtime_checkable
class Moving(Protocol):
    """What a backend whose cells run on several nodes also does: put a stopped cell's
    workspace, from a checkpoint of it, on another node than `away_from` (`devcell node
    drain`). The old workspace stays until the cell ran on the new node."""

    def move_workspace(self, cell: CellRef, checkpoint_id: str, away_from: str) -> Outputs:
        ...


@runtime_checkable
class Watching(Protocol):
    """What a backend that can report its runtimes' changes as they happen also does (the
    Docker engine's event stream): the daemon queues a cell the moment its runtime dies,
    stops or is paused behind DevCell's back, instead of waiting for the periodic resync."""

    def watch(self, on_event: Callable[[str], None], *, stop: threading.Event,
              on_open: Callable[[], None]) -> None:
        """Call `on_event(cell_id)` for every change to a runtime of this state directory
        until `stop` is set. `on_open()` runs once the stream is open (changes before it were
        missed: the caller observes everything). Raises BackendUnavailable when the stream is
        lost (the engine restarted); the caller opens it again."""
        ...


ObserveAll = Callable[[Any], dict[str, Observed]]
"""`observe_all(state_dir)`: every runtime a backend holds for a state directory, by cell id,
in one call (one list call to the engine), imported without the backend's SDK so that
commands observing before they act stay fast. A cell missing from the result has no runtime."""


class Backend(Protocol):
    name: str
    capabilities: Capabilities

    def observe(self, cell: CellRef) -> Observed: ...

    def volume_exists(self, volume_id: str) -> bool: ...

    def create_volume(self, cell: CellRef, volume_id: str, *, from_checkpoint: str | None
                      ) -> Outputs: ...

    def delete_volume(self, volume_id: str) -> Outputs: ...

    def create(self, cell: CellRef, runtime_hash: str) -> Outputs: ...

    def start(self, cell: CellRef) -> Outputs: ...

    def stop(self, cell: CellRef) -> Outputs: ...

    def delete(self, cell: CellRef) -> Outputs: ...

    def quiesce(self, cell: CellRef) -> Outputs: ...

    def checkpoint(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo: ...

    def resume(self, cell: CellRef) -> Outputs: ...

    def checkpoint_exists(self, checkpoint_id: str) -> bool: ...

    def find_checkpoint(self, checkpoint_id: str) -> CheckpointInfo | None:
        """A complete checkpoint with this id, made earlier (e.g. before a crash), or None."""
        ...

    def workspace_changed_since(self, volume_id: str, checkpoint_id: str | None) -> bool:
        """Whether the workspace holds changes that checkpoint (or, with None, no checkpoint)
        does not: deleting it would lose work. False when the backend keeps no files."""
        ...

    def volumes_of(self, cell_id: str) -> list[str]:
        """Ids of the volumes the backend holds for this cell (found by their labels)."""
        ...

    def delete_checkpoint(self, checkpoint_id: str) -> Outputs: ...

    def checkpoint_files(self, checkpoint_id: str) -> Path | None:
        """The directory holding a complete checkpoint's workspace tree, to read (snapshot
        export; never to write: checkpoints are immutable), or None when the backend keeps no
        files. BackendNotFound when there is no such checkpoint."""
        ...

    def checkpoint_sidecars(self, checkpoint_id: str) -> Path | None:
        """The directory of a checkpoint holding its sidecars' data (one `<name>/` each, to
        read: snapshot export), or None when it saved none."""
        ...

    def release_checkpoint_files(self, checkpoint_id: str) -> None:
        """The read of `checkpoint_files` is over: what the backend set up for it (a
        container layer's merged view, mounted) is let go once no other reader holds it."""
        ...

    def import_checkpoint(self, checkpoint_id: str, *, cell_id: str, cell_name: str,
                          fill: Fill) -> CheckpointInfo:
        """Make a complete checkpoint whose tree `fill` writes into the directory it is given
        (None on a backend that keeps no files; snapshot import). The checkpoint exists under
        its id only once `fill` returned, and not at all if it raised."""
        ...

    def list_owned(self) -> list[Owned]:
        """Every cell runtime, volume and checkpoint this backend holds for this state
        directory, each with its owning cell, whether or not the database records it (the
        orphan sweep after a crash compares the two)."""
        ...

    def close(self) -> None: ...
