-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: audit
-- dialect: sqlite
-- form: row_lock
-- table: audit_queue
-- columns: id=id payload=entry
-- max_attempts: none
-- dead_letter: none
-- note: BEGIN IMMEDIATE holds the database's write lock while the handler runs: correct but serial

-- name: schema
-- Creates the queue table, if missing.
CREATE TABLE IF NOT EXISTS "audit_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "entry" TEXT NOT NULL
);

-- name: enqueue
-- Adds one message.
INSERT INTO "audit_queue" ("entry")
VALUES (:payload)
RETURNING "id" AS id;

-- name: claim
-- Selects up to limit ready rows and locks them until the transaction ends; locked rows are skipped.
SELECT "id" AS id, "entry" AS payload
FROM "audit_queue"
ORDER BY "id"
LIMIT :limit;

-- name: ack
-- Finishes the row: deletes it.
DELETE FROM "audit_queue"
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
DELETE FROM "audit_queue"
WHERE "id" = :id;
