"""Schema migrations, recorded in the database (`migrations` table and PRAGMA user_version).

Tables are declared through sqlite-utils. The check on open is one PRAGMA read, so commands
that only read (`devcell get`) never import sqlite-utils.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from devcell.errors import StateError

if TYPE_CHECKING:
    import sqlite3
    from contextlib import AbstractContextManager
    from pathlib import Path


class Migratable(Protocol):
    """What the migrations need of a database (store.db.Database is one)."""

    conn: sqlite3.Connection
    path: Path

    def write(self) -> AbstractContextManager[sqlite3.Connection]: ...

_DESIRED_COLUMNS: dict[str, Any] = {
    "id": str,
    "name": str,
    "labels": str,
    "annotations": str,
    "spec": str,
    "spec_hash": str,
    "manifest_hash": str,
    "generation": int,
    "resource_version": int,
    "source": str,
    "phase": str,
    "observed_generation": int,
    "status": str,
    "created_at": str,
    "updated_at": str,
    "deleting_at": str,
    "deleted_at": str,
}
_NOT_NULL = {"name", "spec", "spec_hash", "manifest_hash", "generation", "resource_version",
             "phase", "observed_generation", "status", "created_at", "updated_at"}


def _v1_initial(db: Any) -> None:
    cells = dict(_DESIRED_COLUMNS, backend=str, forked_from=str)
    db["cells"].create(
        cells, pk="id", not_null=_NOT_NULL | {"backend"},
        defaults={"labels": "{}", "annotations": "{}", "status": "{}", "observed_generation": 0},
    )
    snapshots = dict(_DESIRED_COLUMNS, cell_id=str, consistency=str, checkpoint_ref=str,
                     taken_at=str)
    db["snapshots"].create(
        snapshots, pk="id", not_null=_NOT_NULL,
        defaults={"labels": "{}", "annotations": "{}", "status": "{}", "observed_generation": 0},
        foreign_keys=[("cell_id", "cells", "id")],
    )
    # A fork's source snapshot; added after `snapshots` exists so the reference resolves.
    db["cells"].add_foreign_key("forked_from", "snapshots", "id")
    for table in ("cells", "snapshots"):
        db.execute(
            f"CREATE UNIQUE INDEX idx_{table}_live_name ON {table}(name) WHERE deleted_at IS NULL"
        )
        db[table].create_index(["source"], index_name=f"idx_{table}_source")
    db["volumes"].create(
        {"id": str, "cell_id": str, "name": str, "mount_path": str, "from_snapshot_id": str,
         "phase": str, "backend_ref": str, "created_at": str, "deleted_at": str},
        pk="id", not_null={"cell_id", "name", "phase", "created_at"},
        foreign_keys=[("cell_id", "cells", "id"), ("from_snapshot_id", "snapshots", "id")],
    )
    db["volumes"].create_index(["cell_id"])
    db["attachments"].create(
        {"cell_id": str, "volume_id": str, "mount_path": str, "attached_at": str},
        pk=("cell_id", "volume_id"), not_null={"mount_path", "attached_at"},
        foreign_keys=[("cell_id", "cells", "id"), ("volume_id", "volumes", "id")],
    )
    db["operations"].create(
        {"id": str, "object_kind": str, "object_id": str, "object_name": str, "action": str,
         "trigger": str, "status": str, "reason": str, "message": str, "generation": int,
         "current_step": str, "created_at": str, "finished_at": str, "plan": str},
        pk="id", not_null={"object_kind", "object_id", "object_name", "action", "trigger",
                           "status", "created_at"},
    )
    db["operations"].create_index(["object_id", "created_at"])
    db["operations"].create_index(["status"])
    db["operation_steps"].create(
        {"op_id": str, "idx": int, "name": str, "status": str, "started_at": str,
         "finished_at": str, "duration_ms": float, "outputs": str, "error": str},
        pk=("op_id", "idx"), not_null={"name", "status"},
        foreign_keys=[("op_id", "operations", "id")],
    )
    db["events"].create(
        {"id": int, "created_at": str, "object_kind": str, "object_id": str, "object_name": str,
         "type": str, "reason": str, "message": str, "op_id": str},
        pk="id", not_null={"created_at", "object_kind", "object_name", "type", "reason"},
    )
    db["events"].create_index(["object_id", "id"])
    db["applied_sources"].create(
        {"path": str, "digest": str, "objects": str, "applied_at": str},
        pk="path", not_null={"digest", "objects", "applied_at"},
    )


def _v2_controller_status(db: Any) -> None:
    db["controllers"].create(
        {"name": str, "pid": int, "host": str, "started_at": str, "stopped_at": str,
         "manifests": str, "conditions": str, "updated_at": str},
        pk="name", not_null={"conditions", "updated_at"},
    )


def _v3_cell_list_columns(db: Any) -> None:
    """Columns `get cells` shows, kept beside the spec so listing never parses JSON."""
    db["cells"].add_column("desired_state", str)
    db["cells"].add_column("image", str)
    db.execute("UPDATE cells SET desired_state = json_extract(spec, '$.state'), "
               "image = json_extract(spec, '$.image')")
    # Covering index: `get cells` reads the index alone, never the wide rows (spec, status).
    db.execute("CREATE INDEX idx_cells_list ON cells(name, backend, phase, desired_state, "
               "created_at, forked_from, id) WHERE deleted_at IS NULL")


def _v4_resume_input(db: Any) -> None:
    """Approval input given to `devcell op resume`, kept until the reconciler resumes."""
    db["operations"].add_column("resume_input", str)


def _v5_restore_request(db: Any) -> None:
    """A cell's pending `snapshot restore` (JSON: the snapshot, the safety snapshot's id and
    name), desired state the cell controller plans from and clears when it is done."""
    db["cells"].add_column("restore", str)


def _v6_pruned_keep(db: Any) -> None:
    """What a pruned cell's deletion keeps (JSON: how long, the safety snapshot's id and
    name), fixed when the prune is recorded (store/prunes.py)."""
    db["cells"].add_column("pruned", str)


def _v7_frozen_mark(db: Any) -> None:
    """When an operation froze the cell and has not resumed it yet (store/frozen.py)."""
    db["cells"].add_column("frozen_at", str)


def _v8_runtime_hold(db: Any) -> None:
    """A cell's runtime hold (store/holds.py: `cell sleep` and `cell start` beside the spec,
    not in it), in the list index too: `get cells` shows it without reading the rows."""
    db["cells"].add_column("held", str)
    db.execute("DROP INDEX IF EXISTS idx_cells_list")
    db.execute("CREATE INDEX idx_cells_list ON cells(name, backend, phase, desired_state, "
               "created_at, forked_from, id, held) WHERE deleted_at IS NULL")


def _v9_tokens_and_actors(db: Any) -> None:
    """API tokens (devcell.auth.tokens: only an HMAC of each, never the token) and who made
    each change: `actor` on events and operations (NULL: recorded before actors were)."""
    db["tokens"].create(
        {"id": str, "user": str, "role": str, "digest": str, "created_at": str,
         "created_by": str, "expires_at": str, "revoked_at": str},
        pk="id", not_null={"user", "role", "digest", "created_at"},
    )
    db["events"].add_column("actor", str)
    db["operations"].add_column("actor", str)


def _v10_cell_owner(db: Any) -> None:
    """A cell's owner (metadata.owner, devcell.auth's policy). The cells recorded before were
    made by the state directory's owner, who runs this migration (store/state_dir.py refuses
    anyone else)."""
    from devcell.store import actor

    db["cells"].add_column("owner", str)
    db.execute("UPDATE cells SET owner = ?", (actor.local_user(),))


MIGRATIONS: list[tuple[int, str, Callable[[Any], None]]] = [
    (1, "initial schema", _v1_initial),
    (2, "controller status", _v2_controller_status),
    (3, "cell list columns", _v3_cell_list_columns),
    (4, "operation resume input", _v4_resume_input),
    (5, "cell restore request", _v5_restore_request),
    (6, "pruned cell keeps its workspace", _v6_pruned_keep),
    (7, "frozen cell mark", _v7_frozen_mark),
    (8, "cell runtime hold", _v8_runtime_hold),
    (9, "tokens and actors", _v9_tokens_and_actors),
    (10, "cell owner", _v10_cell_owner),
]
LATEST = MIGRATIONS[-1][0]  # store/cell_glance.SCHEMA_VERSION spells it out: move it too


def ensure_current(database: Migratable) -> None:
    version = database.conn.execute("PRAGMA user_version").fetchone()[0]
    if version == LATEST:
        return
    if version > LATEST:
        raise StateError(
            f"{database.path} was written by a newer DevCell (schema {version}, "
            f"this one knows {LATEST}); upgrade DevCell"
        )
    import sqlite_utils

    from devcell.store.clock import now

    db = sqlite_utils.Database(database.conn)
    with database.write() as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # re-read under the lock
        if version == LATEST:
            return
        if "migrations" not in db.table_names():
            db.table("migrations").create({"version": int, "name": str, "applied_at": str},
                                    pk="version")
        for number, name, apply in MIGRATIONS:
            if number <= version:
                continue
            apply(db)
            conn.execute("INSERT INTO migrations(version, name, applied_at) VALUES (?, ?, ?)",
                         (number, name, now()))
            conn.execute(f"PRAGMA user_version = {number}")
