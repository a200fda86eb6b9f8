-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "audit"
-- dialect: "sqlite"
-- form: "row_lock"
-- table: "audit_queue"
-- columns: {"id": "id", "payload": "entry"}
-- max_attempts: null
-- dead_letter: null
-- note: "BEGIN IMMEDIATE holds the database's write lock while the handler runs: correct but serial"
-- seal: sha256:16d45d4edd3297bfc25330139815f152a2cdae60ff6134dd445dd198ef39415b

-- name: schema
-- Creates the queue table, if missing.
-- kinds: writes
CREATE TABLE IF NOT EXISTS "audit_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "entry" TEXT NOT NULL
);

-- name: enqueue
-- Adds one message.
-- kinds: writes-returning
INSERT INTO "audit_queue" ("entry")
VALUES (:payload)
RETURNING "id" AS id;

-- name: claim
-- Selects up to limit ready rows and locks them until the transaction ends; locked rows are skipped.
-- kinds: reads
SELECT "id" AS id, "entry" AS payload
FROM "audit_queue"
ORDER BY "id"
LIMIT :limit;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM "audit_queue"
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM "audit_queue"
WHERE "id" = :id;
