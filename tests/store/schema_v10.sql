-- The schema a fresh state.db had at version 10 (sqlite_master in order), as sqlite-utils
-- wrote it. tests/store/test_migrations.py: the plain-SQL migrations write the same text.
-- table migrations on migrations
CREATE TABLE "migrations" (
   "version" INTEGER PRIMARY KEY,
   "name" TEXT,
   "applied_at" TEXT
);
-- table snapshots on snapshots
CREATE TABLE "snapshots" (
   "id" TEXT PRIMARY KEY,
   "name" TEXT NOT NULL,
   "labels" TEXT DEFAULT '{}',
   "annotations" TEXT DEFAULT '{}',
   "spec" TEXT NOT NULL,
   "spec_hash" TEXT NOT NULL,
   "manifest_hash" TEXT NOT NULL,
   "generation" INTEGER NOT NULL,
   "resource_version" INTEGER NOT NULL,
   "source" TEXT,
   "phase" TEXT NOT NULL,
   "observed_generation" INTEGER NOT NULL DEFAULT 0,
   "status" TEXT NOT NULL DEFAULT '{}',
   "created_at" TEXT NOT NULL,
   "updated_at" TEXT NOT NULL,
   "deleting_at" TEXT,
   "deleted_at" TEXT,
   "cell_id" TEXT REFERENCES "cells"("id"),
   "consistency" TEXT,
   "checkpoint_ref" TEXT,
   "taken_at" TEXT
);
-- index sqlite_autoindex_snapshots_1 on snapshots
-- (made by SQLite)
-- table cells on cells
CREATE TABLE "cells" (
   "id" TEXT PRIMARY KEY,
   "name" TEXT NOT NULL,
   "labels" TEXT DEFAULT '{}',
   "annotations" TEXT DEFAULT '{}',
   "spec" TEXT NOT NULL,
   "spec_hash" TEXT NOT NULL,
   "manifest_hash" TEXT NOT NULL,
   "generation" INTEGER NOT NULL,
   "resource_version" INTEGER NOT NULL,
   "source" TEXT,
   "phase" TEXT NOT NULL,
   "observed_generation" INTEGER NOT NULL DEFAULT '0',
   "status" TEXT NOT NULL DEFAULT '{}',
   "created_at" TEXT NOT NULL,
   "updated_at" TEXT NOT NULL,
   "deleting_at" TEXT,
   "deleted_at" TEXT,
   "backend" TEXT NOT NULL,
   "forked_from" TEXT REFERENCES "snapshots"("id")
, "desired_state" TEXT, "image" TEXT, "restore" TEXT, "pruned" TEXT, "frozen_at" TEXT, "held" TEXT, "owner" TEXT);
-- index sqlite_autoindex_cells_1 on cells
-- (made by SQLite)
-- index idx_cells_live_name on cells
CREATE UNIQUE INDEX idx_cells_live_name ON cells(name) WHERE deleted_at IS NULL;
-- index idx_cells_source on cells
CREATE INDEX "idx_cells_source"
    ON "cells" ("source");
-- index idx_snapshots_live_name on snapshots
CREATE UNIQUE INDEX idx_snapshots_live_name ON snapshots(name) WHERE deleted_at IS NULL;
-- index idx_snapshots_source on snapshots
CREATE INDEX "idx_snapshots_source"
    ON "snapshots" ("source");
-- table volumes on volumes
CREATE TABLE "volumes" (
   "id" TEXT PRIMARY KEY,
   "cell_id" TEXT NOT NULL REFERENCES "cells"("id"),
   "name" TEXT NOT NULL,
   "mount_path" TEXT,
   "from_snapshot_id" TEXT REFERENCES "snapshots"("id"),
   "phase" TEXT NOT NULL,
   "backend_ref" TEXT,
   "created_at" TEXT NOT NULL,
   "deleted_at" TEXT
);
-- index sqlite_autoindex_volumes_1 on volumes
-- (made by SQLite)
-- index idx_volumes_cell_id on volumes
CREATE INDEX "idx_volumes_cell_id"
    ON "volumes" ("cell_id");
-- table attachments on attachments
CREATE TABLE "attachments" (
   "cell_id" TEXT REFERENCES "cells"("id"),
   "volume_id" TEXT REFERENCES "volumes"("id"),
   "mount_path" TEXT NOT NULL,
   "attached_at" TEXT NOT NULL,
   PRIMARY KEY ("cell_id", "volume_id")
);
-- index sqlite_autoindex_attachments_1 on attachments
-- (made by SQLite)
-- table operations on operations
CREATE TABLE "operations" (
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
, "resume_input" TEXT, "actor" TEXT);
-- index sqlite_autoindex_operations_1 on operations
-- (made by SQLite)
-- index idx_operations_object_id_created_at on operations
CREATE INDEX "idx_operations_object_id_created_at"
    ON "operations" ("object_id", "created_at");
-- index idx_operations_status on operations
CREATE INDEX "idx_operations_status"
    ON "operations" ("status");
-- table operation_steps on operation_steps
CREATE TABLE "operation_steps" (
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
);
-- index sqlite_autoindex_operation_steps_1 on operation_steps
-- (made by SQLite)
-- table events on events
CREATE TABLE "events" (
   "id" INTEGER PRIMARY KEY,
   "created_at" TEXT NOT NULL,
   "object_kind" TEXT NOT NULL,
   "object_id" TEXT,
   "object_name" TEXT NOT NULL,
   "type" TEXT NOT NULL,
   "reason" TEXT NOT NULL,
   "message" TEXT,
   "op_id" TEXT
, "actor" TEXT);
-- index idx_events_object_id_id on events
CREATE INDEX "idx_events_object_id_id"
    ON "events" ("object_id", "id");
-- table applied_sources on applied_sources
CREATE TABLE "applied_sources" (
   "path" TEXT PRIMARY KEY,
   "digest" TEXT NOT NULL,
   "objects" TEXT NOT NULL,
   "applied_at" TEXT NOT NULL
);
-- index sqlite_autoindex_applied_sources_1 on applied_sources
-- (made by SQLite)
-- table controllers on controllers
CREATE TABLE "controllers" (
   "name" TEXT PRIMARY KEY,
   "pid" INTEGER,
   "host" TEXT,
   "started_at" TEXT,
   "stopped_at" TEXT,
   "manifests" TEXT,
   "conditions" TEXT NOT NULL,
   "updated_at" TEXT NOT NULL
);
-- index sqlite_autoindex_controllers_1 on controllers
-- (made by SQLite)
-- index idx_cells_list on cells
CREATE INDEX idx_cells_list ON cells(name, backend, phase, desired_state, created_at, forked_from, id, held) WHERE deleted_at IS NULL;
-- table tokens on tokens
CREATE TABLE "tokens" (
   "id" TEXT PRIMARY KEY,
   "user" TEXT NOT NULL,
   "role" TEXT NOT NULL,
   "digest" TEXT NOT NULL,
   "created_at" TEXT NOT NULL,
   "created_by" TEXT,
   "expires_at" TEXT,
   "revoked_at" TEXT
);
-- index sqlite_autoindex_tokens_1 on tokens
-- (made by SQLite)
