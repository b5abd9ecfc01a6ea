"""A cell's swarm service as `swarm_cells` writes it (no engine: the spec is plain data), the
fields a cell on a cluster cannot have yet, and spec.placement's validation errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from devcell.backends import load
from devcell.backends.base import CellRef
from devcell.backends.container.swarm_cells import NODE, SwarmBackend, unsupported
from devcell.cli.main import main
from devcell.errors import BackendNotFound, BackendRefused


def configure(state: Path, engine: str = "unix:///nonexistent/docker.sock") -> None:
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state / "config.yaml"
    path.write_text(f"apiVersion: devcell.dev/v1alpha1\nkind: Config\ncluster:\n  engine: {engine}\n")
    os.chmod(path, 0o600)


def cell(**spec: Any) -> CellRef:
    return CellRef("c0ffee01", "api", {"backend": "container", "image": "devcell/busybox:latest",
                                       **spec}, volume_id="v0ffee01")


def test_a_clustered_state_directory_loads_the_swarm_backend(tmp_path: Path) -> None:
    configure(tmp_path / "s")
    assert isinstance(load("container", tmp_path / "s"), SwarmBackend)
    (tmp_path / "single").mkdir()
    assert not isinstance(load("fake", tmp_path / "single"), SwarmBackend)


def test_placement_and_resources_become_constraints_reservations_and_limits(
        tmp_path: Path) -> None:
    configure(tmp_path / "s")
    backend = SwarmBackend(state_dir=tmp_path / "s")
    spec = backend.service_spec(
        cell(resources={"cpus": 0.5, "memory": "64Mi"},
             placement={"nodeLabels": {"zone": "a", "disk": "ssd"}}),
        "hash1", node=None, config=("cfgid", "cfgname"))
    template = spec["TaskTemplate"]
    assert template["Placement"]["Constraints"] == ["node.labels.disk==ssd",
                                                    "node.labels.zone==a"]
    assert template["Resources"]["Reservations"] == {"NanoCPUs": 500_000_000,
                                                     "MemoryBytes": 64 << 20}
    assert template["Resources"]["Limits"] == {"NanoCPUs": 500_000_000,
                                               "MemoryBytes": 64 << 20, "Pids": 4096}
    assert template["RestartPolicy"]["Condition"] == "any"
    assert spec["Mode"] == {"Replicated": {"Replicas": 0}}
    assert "Networks" not in template  # network none: loopback only on the nodes
    container = template["ContainerSpec"]
    assert container["CapabilityDrop"] == ["ALL"]
    assert container["Mounts"][0]["Type"] == "volume"
    assert container["Mounts"][0]["VolumeOptions"]["NoCopy"] is True
    assert container["Configs"][0]["File"]["Name"] == "/devcell/supervisor.sh"
    assert spec["Labels"]["dev.devcell.cell"] == "api" and NODE not in spec["Labels"]

    pinned = backend.service_spec(cell(placement={"reserve": False},
                                       resources={"memory": "64Mi"}),
                                  "hash1", node="n0de", config=("cfgid", "cfgname"))
    assert pinned["TaskTemplate"]["Placement"]["Constraints"] == ["node.id==n0de"]
    assert pinned["TaskTemplate"]["Resources"]["Reservations"] == {}
    assert pinned["Labels"][NODE] == "n0de"


def test_what_needs_a_nodes_disk_is_refused_by_field(tmp_path: Path) -> None:
    assert unsupported(cell().spec) == []
    found = unsupported(cell(sidecars=[{"name": "db"}], network={"mode": "bridge"},
                             hooks={"postCreate": [["true"]]}, user="dev",
                             env=[{"name": "K", "value": "v", "secret": True}]).spec)
    assert [f.split(":")[0] for f in found] == [
        "spec.sidecars", "spec.hooks.postCreate", "spec.network", "spec.user", "spec.env"]
    configure(tmp_path / "s")
    backend = SwarmBackend(state_dir=tmp_path / "s")
    with pytest.raises(BackendRefused, match="spec.sidecars: sidecars share"):
        backend.create_volume(cell(sidecars=[{"name": "db"}]), "v0ffee01",
                              from_checkpoint=None)
    with pytest.raises(BackendNotFound, match="checkpoint snap is on no node of the cluster"):
        backend.create_volume(cell(), "v0ffee01", from_checkpoint="snap")
    assert not backend.volume_exists("v0ffee01")
    backend.create_volume(cell(), "v0ffee01", from_checkpoint=None)
    assert backend.volume_exists("v0ffee01") and backend.volumes_of("c0ffee01") == ["v0ffee01"]


@pytest.mark.parametrize(("placement", "field"), [
    ("nodeLabels: {zone: 'a b'}", "spec.placement.nodeLabels.zone"),
    ("nodeLabels: {'bad key==x': a}", "spec.placement.nodeLabels"),
    ("reserve: maybe", "spec.placement.reserve"),
    ("nodes: [n1]", "spec.placement"),
])
def test_bad_placement_is_refused_naming_file_line_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], placement: str, field: str) -> None:
    manifest = tmp_path / "cell.yaml"
    manifest.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata:\n  name: api\n"
                        "spec:\n  backend: container\n  image: devcell/busybox:latest\n"
                        f"  placement:\n    {placement}\n")
    code = main(["--state-dir", str(tmp_path / "state"), "apply", "--dry-run", "-f",
                 str(manifest)])
    err = capsys.readouterr().err
    assert code != 0
    assert f"{manifest}:9" in err and field in err, err
    assert "Traceback" not in err


def test_a_fork_whose_fill_did_not_complete_is_neither_found_nor_adopted(tmp_path: Path) -> None:
    """Its record is written before the job fills it on the node (so the orphan sweep finds
    it); until the job completed, it is no workspace: the next attempt fills it again. No
    engine: ~0.01 s."""
    configure(tmp_path / "s")
    backend = SwarmBackend(state_dir=tmp_path / "s")
    backend.volumes.write("v0ffee02", {"cell_id": "c0ffee01", "cell": "api", "node": "n0de",
                                       "volume": "x", "from": "snap", "filled": False})
    assert not backend.volume_exists("v0ffee02") and backend.volumes_of("c0ffee01") == []
    backend.volumes.write("v0ffee02", {"cell_id": "c0ffee01", "cell": "api", "node": "n0de",
                                       "volume": "x", "from": "snap", "filled": True})
    assert backend.volume_exists("v0ffee02") and backend.volumes_of("c0ffee01") == ["v0ffee02"]


def test_a_restore_from_a_checkpoint_on_another_node_needs_the_registry(
        tmp_path: Path) -> None:
    """Before any job: the checkpoint's node is not the workspace's, and no cluster.registry
    is configured to carry it across. No engine: ~0.01 s."""
    configure(tmp_path / "s")
    backend = SwarmBackend(state_dir=tmp_path / "s")
    backend.volumes.write("v0ffee03", {"cell_id": "c0ffee01", "cell": "api", "node": "n1",
                                       "volume": "x"})
    backend.checkpoints.write("snap1", {"node": "n2", "volume": "y", "cell_id": "c0ffee01"})
    ref = cell().replace(volume_id="v0ffee03")
    with pytest.raises(BackendRefused, match="is on node n2, the workspace of cell api on "
                                             "node n1: a restore across nodes"):
        backend.restore_workspace(ref, "snap1")
