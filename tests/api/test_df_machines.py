"""devcell.api.df's rows for what vm machines hold: a sleeping machine's files are in use (it
wakes from them), a stopped one's are reclaimable, and a machine snapshot whose RAM file a
running fork maps says so and is in use. The figures themselves are measured in
tests/backends/vm/test_capacity*.py; here, what df makes of them."""

from __future__ import annotations

from pathlib import Path

from devcell.api import capacity, df
from devcell.backends.capacity import CheckpointsUsage, CheckpointUsage, RuntimeUsage, Usage
from devcell.store import references

NONE = frozenset[str]()


def _inventory(measured: df.Measured, *, live_snapshots: frozenset[str] = NONE
               ) -> df.Inventory:
    refs = references.References(frozenset({"cell_a", "cell_b", "cell_f"}), NONE,
                                 live_snapshots, NONE, NONE, NONE)
    return df.Inventory(Path("/nonexistent"), refs,
                        {"cell_a": "asleep", "cell_b": "stopped", "cell_f": "fork"},
                        {"snap_w": "warm"}, [measured], capacity.Problems())


def test_a_sleeping_machines_files_are_in_use_and_a_stopped_ones_reclaimable() -> None:
    measured = df.Measured("vm", measures=True, runtimes={
        "cell_a": RuntimeUsage(running=False, files_bytes=130 << 20, ram_file_bytes=128 << 20,
                               held=True),
        "cell_b": RuntimeUsage(running=False, files_bytes=1 << 20, ram_file_bytes=0)})
    row, items = df.runtimes(_inventory(measured))
    assert row == df.Row("Runtimes", 2, 1, (130 << 20) + (1 << 20), 1 << 20)
    by_owner = {i.owner: i for i in items}
    assert by_owner["asleep"].active and by_owner["asleep"].detail == \
        f"asleep, RAM file {128 << 20} B"
    assert by_owner["asleep"].measured["ramFileBytes"] == 128 << 20
    assert not by_owner["stopped"].active and by_owner["stopped"].detail == "stopped"


def test_a_machine_snapshot_a_running_fork_maps_is_in_use_and_says_who_maps_it() -> None:
    item = CheckpointUsage("snap_w", "cell_a", Usage(logical=95 << 20, disk=96 << 20),
                           unique=3 << 20, memory_disk=93 << 20, mapped_by=("cell_f",))
    measured = df.Measured("vm", measures=True, checkpoints=CheckpointsUsage(
        (item,), Usage(disk=96 << 20), 3 << 20))
    row, [shown] = df.checkpoints(_inventory(measured, live_snapshots=frozenset({"snap_w"})))
    assert row == df.Row("Checkpoints", 1, 1, 96 << 20, 3 << 20)
    assert (shown.name, shown.active, shown.size) == ("warm", True, 3 << 20)
    assert shown.detail == (f"kept by a live snapshot; memory {93 << 20} B; its RAM file is "
                            "mapped by running fork: not freed")
    assert shown.measured == {"diskBytes": 96 << 20, "memoryDiskBytes": 93 << 20,
                              "mappedBy": "fork"}
