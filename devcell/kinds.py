"""The registry of kinds: everything DevCell knows about each kind of object, in one place.

Every layer asks here instead of keeping a map of its own: manifests (which kinds exist, their
schema file), the store (table, id prefix), the reconciler (the controller, which objects must
never be reconciled at once, which objects to wake when one becomes ready) and the CLI (the
names a user may type). Adding a kind means: its JSON Schema, an entry here, its controller,
its migration (the table) and its tests.

Pure data at the bottom layer: the controller is named by its import path and loaded only by
the reconciler, so reading the registry imports nothing (`devcell get` stays fast).
"""

from __future__ import annotations

from devcell.records import Record


class Wakes(Record):
    """When an object of this kind makes progress, reconcile the `kind` objects whose column
    `via` names it (those still waiting: `waiting_while_null` is NULL, when given).

    With `named_by`, the other way round: the `kind` object whose column `via` equals this
    object's column `named_by` (a fork names its snapshot in `forked_from`), only while that
    object is being deleted when `while_deleting` (a snapshot being deleted waits until its
    forks are gone: the last fork's deletion wakes it).
    """

    kind: str
    via: str
    waiting_while_null: str | None = None
    named_by: str | None = None
    while_deleting: bool = False


class Kind(Record):
    """One kind of desired object.

    A record (devcell/records.py), neither a dataclass nor a NamedTuple: this module loads on
    every command, dataclasses pulls in `inspect` and a NamedTuple compiles its class with
    `exec` (~1.5 ms each).
    """

    name: str
    """As written in manifests: Cell."""
    singular: str
    plural: str
    short_names: tuple[str, ...]
    table: str
    id_prefix: str
    schema: str
    """The schema's key in devcell/schemas (`<schema>.schema.json`)."""
    controller: str
    """`module:Class` of its controller, imported by the reconciler when it first needs it."""
    owner: tuple[str, str] | None = None
    """(kind, column): the object it belongs to. An object and those it owns are never
    reconciled at once (a snapshot quiesces its cell; the cell's turn would repair that)."""
    wakes: tuple[Wakes, ...] = ()
    listed: tuple[tuple[str, str], ...] = ()
    """(column, spec field): spec fields copied into columns of their own for fast listing."""


CELL = Kind(
    name="Cell", singular="cell", plural="cells", short_names=(), table="cells",
    id_prefix="cell", schema="cell", controller="devcell.controllers.cell:CellController",
    wakes=(Wakes("Snapshot", via="cell_id", waiting_while_null="checkpoint_ref"),
           # Its snapshots being deleted: the cell's retain expires them in its own turn.
           Wakes("Snapshot", via="cell_id", while_deleting=True),
           # A fork's snapshot: one being deleted waits until its forks are gone, and one
           # whose ttl ran out is kept while they exist; the fork's progress wakes both.
           Wakes("Snapshot", via="id", named_by="forked_from")),
    listed=(("desired_state", "state"), ("image", "image")),
)
SNAPSHOT = Kind(
    name="Snapshot", singular="snapshot", plural="snapshots", short_names=("snap",),
    table="snapshots", id_prefix="snap", schema="snapshot",
    controller="devcell.controllers.snapshot:SnapshotController",
    owner=("Cell", "cell_id"), wakes=(Wakes("Cell", via="forked_from"),),
)

KINDS: dict[str, Kind] = {k.name: k for k in (CELL, SNAPSHOT)}
"""Every kind by its manifest name, in dependency order (a snapshot needs its cell)."""

OTHER_ID_PREFIXES = ("vol", "op")
"""Ids of records that are not kinds of desired object (volumes, operations)."""


def get(name: str) -> Kind:
    """The kind called `name` (Cell); KeyError for anything else."""
    return KINDS[name]


def names() -> tuple[str, ...]:
    return tuple(KINDS)


def by_word(word: str) -> Kind | None:
    """The kind a user means by `word`: Cell, cell, cells, snap... (case-insensitive)."""
    key = word.lower()
    for kind in KINDS.values():
        if key in (kind.name.lower(), kind.singular, kind.plural, *kind.short_names):
            return kind
    return None


def words() -> dict[str, str]:
    """Every word a user may type for a kind, mapped to the kind's name."""
    out: dict[str, str] = {}
    for kind in KINDS.values():
        for word in (kind.singular, kind.plural, *kind.short_names):
            out[word] = kind.name
    return out


def id_prefixes() -> tuple[str, ...]:
    """Prefixes (with their underscore) of every id DevCell makes."""
    return tuple(f"{p}_" for p in (*(k.id_prefix for k in KINDS.values()), *OTHER_ID_PREFIXES))
