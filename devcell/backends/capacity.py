"""What a backend measures of what it holds (`devcell df`, `get -o wide`): the records of a
measurement and the Accounting protocol the backends' capacity modules implement.

Apart from backends/base.py because only the commands that measure use them: the records are
frozen dataclasses, each built at import, and a checkpoint or an exec has no use for them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from devcell.records import Record


class Usage(Record):
    """Bytes of a tree, each inode once (as `du`): apparent size and blocks allocated."""

    logical: int = 0
    disk: int = 0
    files: int = 0


class WorkspaceUsage(Record):
    """A volume as the filesystem has it now (Accounting.workspace_usage)."""

    volume_id: str
    workspace: Usage
    """The workspace as the cell sees it (a fork's includes its snapshot's files)."""
    own_disk: int
    """Bytes on disk the volume holds itself (a fork: its upper layer; logs included):
    what deleting it frees."""
    logs_disk: int
    changed_files: int
    changed_bytes: int
    """New or changed since `since`: what the next checkpoint would copy, not link."""
    since: str | None
    """The checkpoint compared with (None: never checkpointed, everything counts)."""
    fork_of: str | None = None
    """The checkpoint an overlay fork stands on (its own writes are then `own_disk`)."""


class CheckpointUsage(Record):
    checkpoint_id: str
    cell_id: str
    usage: Usage
    unique: int
    """What deleting it would free: inodes all of whose links lie in it; 0 while a live fork
    stands on it (it cannot be deleted before the fork)."""
    forks: tuple[str, ...] = ()
    """Volumes whose overlay stands on it."""
    memory_disk: int = 0
    """Of usage.disk, the machine memory kept with it (a vm machine snapshot's RAM, device
    state, root and config disks; a sleep's saved device state)."""
    mapped_by: tuple[str, ...] = ()
    """Cells whose running machine maps its RAM file (a vm fork): that file outlives its
    deletion while they run, so it is not in `unique`."""


class CheckpointsUsage(Record):
    items: tuple[CheckpointUsage, ...]
    total: Usage
    """All of them, each inode once however many checkpoints link it."""
    freed_together: int
    """What deleting every one no fork stands on would free, shared inodes included."""


class RuntimeUsage(Record):
    """A cell's runtime as its engine and cgroup report it now."""

    running: bool
    memory_bytes: int | None = None
    cpu_seconds: float | None = None
    """CPU time used since the runtime started."""
    cgroup: str | None = None
    """v1 or v2: the hierarchy read."""
    writable_bytes: int | None = None
    """The runtime's own writable layer (the engine's SizeRw), with the layers of its root
    filesystem kept across recreates (container/rootfs.py), when asked for."""
    files_bytes: int | None = None
    """Blocks allocated to the runtime's own files, each inode once, as `du` (a vm machine's
    directory: root overlay, config disk, RAM file); None: it keeps none."""
    ram_file_bytes: int | None = None
    """Of files_bytes, the guest RAM file's (sparse: the pages the guest touched)."""
    held: bool = False
    """Not running, but kept to resume (a sleeping vm machine): its files are in use."""


@runtime_checkable
class Accounting(Protocol):
    """How a backend that keeps files or runtimes measures them, from the filesystem and the
    engine, never from what the database recorded (`backends.accounting(name, state_dir)`).
    `devcell get -o wide` and `devcell df` ask; nothing is measured otherwise."""

    def workspace_usage(self, volume_id: str) -> WorkspaceUsage | None:
        """None when the backend holds no such volume."""
        ...

    def checkpoints_usage(self, checkpoint_ids: list[str] | None = None) -> CheckpointsUsage:
        """The given checkpoints (all of them with None), measured together."""
        ...

    def runtimes_usage(self, *, sizes: bool = False) -> dict[str, RuntimeUsage]:
        """Every runtime of this state directory, by cell id (sizes: with writable_bytes)."""
        ...

    def volumes(self) -> list[tuple[str, str]]:
        """(volume id, owning cell id) of every volume it holds."""
        ...

    def close(self) -> None: ...
