-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "invoices"
-- dialect: "sqlite"
-- form: "row_lock"
-- table: "invoices_queue"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after", "processed_at": "processed_at"}
-- max_attempts: 4
-- dead_letter: {"table": "invoices_dead"}
-- note: "BEGIN IMMEDIATE holds the database's write lock while the handler runs: correct but serial"
-- seal: sha256:19fd3491e9e20f70157c56a919779d90ed8efc5bcd1f0937036b504521db849a

-- name: schema
-- Creates the queue table, its dead-letter table and the index the claim reads, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS "invoices_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "processed_at" TEXT
);
CREATE INDEX IF NOT EXISTS "invoices_queue_claim" ON "invoices_queue" ("id") WHERE "processed_at" IS NULL;
CREATE TABLE IF NOT EXISTS "invoices_dead" (
  "id" INTEGER PRIMARY KEY,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "processed_at" TEXT
);

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now.
-- kinds: writes-returning
INSERT INTO "invoices_queue" ("payload", "retry_after")
VALUES (:payload, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'))
RETURNING "id" AS id;

-- name: claim
-- Selects up to limit ready rows and locks them until the transaction ends; locked rows are skipped.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "invoices_queue"
WHERE "processed_at" IS NULL
  AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
ORDER BY "id"
LIMIT :limit;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE "invoices_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE "invoices_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: retry
-- Returns the row at once, counting the attempt (without an attempt column the runtime rolls back instead).
-- kinds: writes
UPDATE "invoices_queue"
SET "attempt" = "attempt" + 1
WHERE "id" = :id;

-- name: retry_after
-- Returns the row delay_s seconds from now, counting the attempt.
-- kinds: writes
UPDATE "invoices_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "attempt" = "attempt" + 1
WHERE "id" = :id;

-- name: dead_letter
-- At the cap: moves the row into invoices_dead, payload and count kept (a copy, then a delete, in one transaction).
-- kinds: writes writes
INSERT INTO "invoices_dead" ("id", "payload", "attempt", "retry_after", "processed_at")
SELECT "id", "payload", "attempt" + 1, "retry_after", "processed_at"
FROM "invoices_queue"
WHERE "id" = :id;
DELETE FROM "invoices_queue"
WHERE "id" = :id;
