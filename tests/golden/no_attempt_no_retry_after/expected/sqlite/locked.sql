-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "locked"
-- dialect: "sqlite"
-- form: "row_lock"
-- table: "locked"
-- columns: {"id": "id", "payload": "payload", "processed_at": "done_at"}
-- max_attempts: null
-- dead_letter: null
-- note: "BEGIN IMMEDIATE holds the database's write lock while the handler runs: correct but serial"
-- seal: sha256:0808eeb1cdee9bb44db17543c8edde55b9c078a81cd2adcb1ff16e56d58a82a9

-- name: schema
-- Creates the queue table and the index the claim reads, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS "locked" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "done_at" TEXT
);
CREATE INDEX IF NOT EXISTS "locked_claim" ON "locked" ("id") WHERE "done_at" IS NULL;

-- name: enqueue
-- Adds one message.
-- kinds: writes-returning
INSERT INTO "locked" ("payload")
VALUES (:payload)
RETURNING "id" AS id;

-- name: claim
-- Selects up to limit ready rows and locks them until the transaction ends; locked rows are skipped.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload
FROM "locked"
WHERE "done_at" IS NULL
ORDER BY "id"
LIMIT :limit;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE "locked"
SET "done_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE "locked"
SET "done_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;
