"""Schema migrations, recorded in the database (`migrations` table and PRAGMA user_version).

Each migration is plain SQL on the standard library's sqlite3: a fresh state directory's first
command used to import sqlite-utils to declare the tables (about 0.3 s of CPU, with dateutil and
its plugins). The statements are the ones sqlite-utils ran, so the stored schema is the same
text it wrote (tests/store/schema_v10.sql holds it). The check on open is one PRAGMA read.
"""

from __future__ import annotations

from collections.abc import Callable

from devcell.errors import StateError

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    import sqlite3
    from contextlib import AbstractContextManager
    from pathlib import Path
    from typing import Protocol

    class Migratable(Protocol):
        """What the migrations need of a database (store.db.Database is one)."""

        conn: sqlite3.Connection
        path: Path

        def write(self) -> AbstractContextManager[sqlite3.Connection]: ...


def _desired_columns(default_zero: str) -> str:
    """The columns cells and snapshots share (`observed_generation`'s default is spelled
    `'0'` in cells: sqlite-utils wrote it so when it rebuilt the table for `forked_from`)."""
    return f"""   "id" TEXT PRIMARY KEY,
   "name" TEXT NOT NULL,
   "labels" TEXT DEFAULT '{{}}',
   "annotations" TEXT DEFAULT '{{}}',
   "spec" TEXT NOT NULL,
   "spec_hash" TEXT NOT NULL,
   "manifest_hash" TEXT NOT NULL,
   "generation" INTEGER NOT NULL,
   "resource_version" INTEGER NOT NULL,
   "source" TEXT,
   "phase" TEXT NOT NULL,
   "observed_generation" INTEGER NOT NULL DEFAULT {default_zero},
   "status" TEXT NOT NULL DEFAULT '{{}}',
   "created_at" TEXT NOT NULL,
   "updated_at" TEXT NOT NULL,
   "deleting_at" TEXT,
   "deleted_at" TEXT,
"""


_MIGRATIONS_TABLE = """CREATE TABLE "migrations" (
   "version" INTEGER PRIMARY KEY,
   "name" TEXT,
   "applied_at" TEXT
)"""

_V1 = [
    # snapshots before cells: the order sqlite-utils left them in (it rebuilt cells last).
    # SQLite checks a REFERENCES clause when rows are written, not when the table is made.
    f"""CREATE TABLE "snapshots" (
{_desired_columns("0")}   "cell_id" TEXT REFERENCES "cells"("id"),
   "consistency" TEXT,
   "checkpoint_ref" TEXT,
   "taken_at" TEXT
)""",
    f"""CREATE TABLE "cells" (
{_desired_columns("'0'")}   "backend" TEXT NOT NULL,
   "forked_from" TEXT REFERENCES "snapshots"("id")
)""",
    "CREATE UNIQUE INDEX idx_cells_live_name ON cells(name) WHERE deleted_at IS NULL",
    'CREATE INDEX "idx_cells_source"\n    ON "cells" ("source")',
    "CREATE UNIQUE INDEX idx_snapshots_live_name ON snapshots(name) WHERE deleted_at IS NULL",
    'CREATE INDEX "idx_snapshots_source"\n    ON "snapshots" ("source")',
    """CREATE TABLE "volumes" (
   "id" TEXT PRIMARY KEY,
   "cell_id" TEXT NOT NULL REFERENCES "cells"("id"),
   "name" TEXT NOT NULL,
   "mount_path" TEXT,
   "from_snapshot_id" TEXT REFERENCES "snapshots"("id"),
   "phase" TEXT NOT NULL,
   "backend_ref" TEXT,
   "created_at" TEXT NOT NULL,
   "deleted_at" TEXT
)""",
    'CREATE INDEX "idx_volumes_cell_id"\n    ON "volumes" ("cell_id")',
    """CREATE TABLE "attachments" (
   "cell_id" TEXT REFERENCES "cells"("id"),
   "volume_id" TEXT REFERENCES "volumes"("id"),
   "mount_path" TEXT NOT NULL,
   "attached_at" TEXT NOT NULL,
   PRIMARY KEY ("cell_id", "volume_id")
)""",
    """CREATE TABLE "operations" (
   "id" TEXT PRIMARY KEY,
   "object_kind" TEXT NOT NULL,
   "object_id" TEXT NOT NULL,
   "object_name" TEXT NOT NULL,
   "action" TEXT NOT NULL,
   "trigger" TEXT NOT NULL,
   "status" TEXT NOT NULL,
   "reason" TEXT,
   "message" TEXT,
   "generation" INTEGER,
   "current_step" TEXT,
   "created_at" TEXT NOT NULL,
   "finished_at" TEXT,
   "plan" TEXT
)""",
    'CREATE INDEX "idx_operations_object_id_created_at"\n'
    '    ON "operations" ("object_id", "created_at")',
    'CREATE INDEX "idx_operations_status"\n    ON "operations" ("status")',
    """CREATE TABLE "operation_steps" (
   "op_id" TEXT REFERENCES "operations"("id"),
   "idx" INTEGER,
   "name" TEXT NOT NULL,
   "status" TEXT NOT NULL,
   "started_at" TEXT,
   "finished_at" TEXT,
   "duration_ms" REAL,
   "outputs" TEXT,
   "error" TEXT,
   PRIMARY KEY ("op_id", "idx")
)""",
    """CREATE TABLE "events" (
   "id" INTEGER PRIMARY KEY,
   "created_at" TEXT NOT NULL,
   "object_kind" TEXT NOT NULL,
   "object_id" TEXT,
   "object_name" TEXT NOT NULL,
   "type" TEXT NOT NULL,
   "reason" TEXT NOT NULL,
   "message" TEXT,
   "op_id" TEXT
)""",
    'CREATE INDEX "idx_events_object_id_id"\n    ON "events" ("object_id", "id")',
    """CREATE TABLE "applied_sources" (
   "path" TEXT PRIMARY KEY,
   "digest" TEXT NOT NULL,
   "objects" TEXT NOT NULL,
   "applied_at" TEXT NOT NULL
)""",
]


def _run(*statements: str) -> Callable[[sqlite3.Connection], None]:
    def apply(conn: sqlite3.Connection) -> None:
        for sql in statements:
            conn.execute(sql)
    return apply


_v1_initial = _run(*_V1)

_v2_controller_status = _run("""CREATE TABLE "controllers" (
   "name" TEXT PRIMARY KEY,
   "pid" INTEGER,
   "host" TEXT,
   "started_at" TEXT,
   "stopped_at" TEXT,
   "manifests" TEXT,
   "conditions" TEXT NOT NULL,
   "updated_at" TEXT NOT NULL
)""")

_v3_cell_list_columns = _run(
    # Columns `get cells` shows, kept beside the spec so listing never parses JSON.
    'ALTER TABLE "cells" ADD COLUMN "desired_state" TEXT',
    'ALTER TABLE "cells" ADD COLUMN "image" TEXT',
    "UPDATE cells SET desired_state = json_extract(spec, '$.state'), "
    "image = json_extract(spec, '$.image')",
    # Covering index: `get cells` reads the index alone, never the wide rows (spec, status).
    "CREATE INDEX idx_cells_list ON cells(name, backend, phase, desired_state, "
    "created_at, forked_from, id) WHERE deleted_at IS NULL")

_v4_resume_input = _run(
    # Approval input given to `devcell op resume`, kept until the reconciler resumes.
    'ALTER TABLE "operations" ADD COLUMN "resume_input" TEXT')

_v5_restore_request = _run(
    # A cell's pending `snapshot restore` (JSON: the snapshot, the safety snapshot's id and
    # name), desired state the cell controller plans from and clears when it is done.
    'ALTER TABLE "cells" ADD COLUMN "restore" TEXT')

_v6_pruned_keep = _run(
    # What a pruned cell's deletion keeps (JSON: how long, the safety snapshot's id and
    # name), fixed when the prune is recorded (store/prunes.py).
    'ALTER TABLE "cells" ADD COLUMN "pruned" TEXT')

_v7_frozen_mark = _run(
    # When an operation froze the cell and has not resumed it yet (store/frozen.py).
    'ALTER TABLE "cells" ADD COLUMN "frozen_at" TEXT')

_v8_runtime_hold = _run(
    # A cell's runtime hold (store/holds.py: `cell sleep` and `cell start` beside the spec,
    # not in it), in the list index too: `get cells` shows it without reading the rows.
    'ALTER TABLE "cells" ADD COLUMN "held" TEXT',
    "DROP INDEX IF EXISTS idx_cells_list",
    "CREATE INDEX idx_cells_list ON cells(name, backend, phase, desired_state, "
    "created_at, forked_from, id, held) WHERE deleted_at IS NULL")

_v9_tokens_and_actors = _run(
    # API tokens (devcell.auth.tokens: only an HMAC of each, never the token) and who made
    # each change: `actor` on events and operations (NULL: recorded before actors were).
    """CREATE TABLE "tokens" (
   "id" TEXT PRIMARY KEY,
   "user" TEXT NOT NULL,
   "role" TEXT NOT NULL,
   "digest" TEXT NOT NULL,
   "created_at" TEXT NOT NULL,
   "created_by" TEXT,
   "expires_at" TEXT,
   "revoked_at" TEXT
)""",
    'ALTER TABLE "events" ADD COLUMN "actor" TEXT',
    'ALTER TABLE "operations" ADD COLUMN "actor" TEXT')


def _v10_cell_owner(conn: sqlite3.Connection) -> None:
    """A cell's owner (metadata.owner, devcell.auth's policy). The cells recorded before were
    made by the state directory's owner, who runs this migration (store/state_dir.py refuses
    anyone else)."""
    from devcell.store import actor

    conn.execute('ALTER TABLE "cells" ADD COLUMN "owner" TEXT')
    conn.execute("UPDATE cells SET owner = ?", (actor.local_user(),))


def _v11_change_log(conn: sqlite3.Connection) -> None:
    """The change log (store/changes.py): a row per object a write touched, written by
    triggers in the writing transaction, so no writer can forget it. Its sequence starts
    after the newest event id, the version clients held before (one older than what is
    kept is answered 410 Gone, never taken for a newer one)."""
    from devcell.store import changes

    for sql in changes.SCHEMA:
        conn.execute(sql)
    conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('changes', "
                 "(SELECT coalesce(max(id), 0) FROM events))")


def _v12_snapshot_owner(conn: sqlite3.Connection) -> None:
    """A snapshot's own owner (auth.resources: who may fork, export and delete it once its
    cell is gone, or when it was imported or pulled without one). A snapshot recorded before
    is its cell's owner's when that cell is recorded (live or deleted), else the state
    directory's owner's, who runs this migration (as v10)."""
    from devcell.store import actor

    conn.execute('ALTER TABLE "snapshots" ADD COLUMN "owner" TEXT')
    conn.execute("UPDATE snapshots SET owner = coalesce((SELECT cells.owner FROM cells "
                 "WHERE cells.id = snapshots.cell_id), ?)", (actor.local_user(),))


MIGRATIONS: list[tuple[int, str, Callable[[sqlite3.Connection], None]]] = [
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
    (11, "change log", _v11_change_log),
    (12, "snapshot owner", _v12_snapshot_owner),
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
    from devcell.store.clock import now

    with database.write() as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # re-read under the lock
        if version == LATEST:
            return
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                            "AND name = 'migrations'").fetchone():
            conn.execute(_MIGRATIONS_TABLE)
        for number, name, apply in MIGRATIONS:
            if number <= version:
                continue
            apply(conn)
            conn.execute("INSERT INTO migrations(version, name, applied_at) VALUES (?, ?, ?)",
                         (number, name, now()))
            conn.execute(f"PRAGMA user_version = {number}")
