"""Step names: the words an operation records for each thing it asked a backend to do.

One StrEnum for every kind, because kinds share steps (a snapshot and a sleep both quiesce,
checkpoint and resume a cell) and the recorded words must stay the same across versions:
operations, run snapshots and failpoints (`step.<name>.before-call`) all name them.
"""

from __future__ import annotations

from enum import StrEnum


class StepName(StrEnum):
    CREATE_VOLUME = "create-volume"
    ADOPT_VOLUME = "adopt-volume"
    """Record a volume an operation made before it died (found by its labels)."""
    DELETE_VOLUME = "delete-volume"
    HOST_INITIALIZE = "host-initialize"
    """Run spec.hooks.hostInitialize on the host before a start (devcontainer.json's
    initializeCommand), when the configuration allows host commands."""
    PULL_IMAGE = "pull-image"
    """Fetch the cell's image from its registry (spec.imagePullPolicy says when)."""
    BUILD_IMAGE = "build-image"
    """Build the cell's image from spec.build (only when no image has its digest's tag)."""
    DELETE_IMAGES = "delete-images"
    """Remove the images DevCell built for a deleted cell (its labels: this state directory,
    this cell), those no container uses."""
    CREATE = "create"
    START = "start"
    STOP = "stop"
    KEEP_ROOTFS = "keep-rootfs"
    """Before a recreate, on a backend whose stopped runtime keeps its root filesystem: carry
    it into the new runtime when that is made on the same image (else say it starts fresh)."""
    DELETE = "delete"
    QUIESCE = "quiesce"
    """Hooks, sync, freeze: the workspace holds still for a checkpoint."""
    CHECKPOINT = "checkpoint"
    """Copy the workspace (filesystem consistency) or record it (metadata)."""
    RESUME = "resume"
    DELETE_CHECKPOINT = "delete-checkpoint"
    ADOPT_CHECKPOINT = "adopt-checkpoint"
    EXPORT_CHECKPOINT = "export-checkpoint"
    """Write a snapshot's checkpoint as an archive (`snapshot export`)."""
    IMPORT_CHECKPOINT = "import-checkpoint"
    """Check an archive and make a checkpoint of its tree (`snapshot import`)."""
    PUSH_CHECKPOINT = "push-checkpoint"
    """Write a snapshot's checkpoint as an OCI artifact to a registry (`snapshot push`)."""
    SAVE_MACHINE = "save-machine"
    """Sleep on a backend with memory state: memory and disk saved, the machine stopped."""
    RESTORE_MACHINE = "restore-machine"
    """Wake from save-machine: processes go on where they were."""
    SNAPSHOT_MACHINE = "snapshot-machine"
    """A snapshot that keeps memory: disk and machine saved at one paused moment, the cell
    runs on (Snapshot spec.consistency: machine)."""
    RESTORE_WORKSPACE = "restore-workspace"
    """Replace a cell's workspace, all at once, by a copy of a checkpoint (`snapshot restore`)."""
    INSTALL_DOTFILES = "install-dotfiles"
    """Clone spec.dotfiles on the host and install them in the running cell (once a runtime;
    a failing install script is recorded in the status, the cell left running)."""
    RERUN_HOOKS = "rerun-hooks"
    """Run the cell's postCreate (then postStart) hooks again in its running runtime, when
    asked (`devcell cell rerun-hooks`); a failing hook is recorded, the cell left running."""
    RESTART_SERVICE = "restart-service"
    """Restart one service of the running cell through its supervisor (`cell restart`)."""
    EXPIRE = "expire"
    """Retention: ask for an expired snapshot's deletion (no backend call; judged again in
    the step's write, so a snapshot a fork came to depend on meanwhile is kept)."""
    SCHEDULE_SNAPSHOT = "schedule-snapshot"
    """A cell's schedule: record the snapshot of the period that is due (no backend call)."""
