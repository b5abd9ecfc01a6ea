"""Where the container backend keeps things under the state directory, and the ids it accepts.

Every path is built from an id that first passed `host.ids.safe_id`, so no name can make a path
escape the state directory.

    <state>/volumes/<vol_id>/volume.json        marker: which cell the volume belongs to
    <state>/volumes/<vol_id>/workspace/         bind-mounted at spec.workspace.mountPath
                                                (a fork's: an overlay mount on its checkpoint)
    <state>/volumes/<vol_id>/upper/, work/      a fork's own writes, overlay's work directory
    <state>/volumes/<vol_id>/logs/<svc>.log     per-service logs (mounted at /var/log/devcell)
    <state>/volumes/<vol_id>/sidecars/<name>/   a sidecar's data, bound at its volume.mountPath
    <state>/images/checkpoints/<id>/            checkpoint.json + workspace/ (complete ones only)
                                                + sources.rec (what the next one may share)
                                                + layer.json, view/ (a layer: its paths, and
                                                its overlay over the full tree, when read)
                                                + sidecars/<name>/ (each sidecar's data, copied)
    <state>/containers/<cell_id>/               supervisor.sh, secrets.env (mounted read-only)

Where those are mounted inside a cell (`security.RUN_DIR`, `security.SERVICE_LOG_DIR`) is
defined by the security rules that reserve the paths, not here.
"""

from __future__ import annotations

from pathlib import Path

from devcell.backends.host.ids import safe_id
from devcell.records import Record


class Layout(Record):
    """Where the container backend keeps each thing in a state directory."""

    state_dir: Path

    @property
    def volumes(self) -> Path:
        return self.state_dir / "volumes"

    @property
    def checkpoints(self) -> Path:
        return self.state_dir / "images" / "checkpoints"

    @property
    def containers(self) -> Path:
        return self.state_dir / "containers"

    def volume(self, volume_id: str) -> Path:
        return self.volumes / safe_id("volume", volume_id)

    def workspace(self, volume_id: str) -> Path:
        return self.volume(volume_id) / "workspace"

    def upper(self, volume_id: str) -> Path:
        return self.volume(volume_id) / "upper"

    def overlay_work(self, volume_id: str) -> Path:
        return self.volume(volume_id) / "work"

    def logs(self, volume_id: str) -> Path:
        return self.volume(volume_id) / "logs"

    def sidecars(self, volume_id: str) -> Path:
        return self.volume(volume_id) / "sidecars"

    def sidecar_data(self, volume_id: str, sidecar: str) -> Path:
        return self.sidecars(volume_id) / safe_id("sidecar", sidecar)

    def checkpoint_sidecars(self, checkpoint_id: str) -> Path:
        return self.checkpoint(checkpoint_id) / "sidecars"

    def marker(self, volume_id: str) -> Path:
        return self.volume(volume_id) / "volume.json"

    def checkpoint(self, checkpoint_id: str) -> Path:
        return self.checkpoints / safe_id("checkpoint", checkpoint_id)

    def run_dir(self, cell_id: str) -> Path:
        return self.containers / safe_id("cell", cell_id)

    def contains(self, path: Path) -> bool:
        """Whether `path` (symbolic links resolved) lies inside the state directory."""
        return path.resolve().is_relative_to(self.state_dir.resolve())
