-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: webhooks
-- dialect: sqlite
-- form: advisory
-- table: webhooks_queue
-- columns: id=id payload=payload attempt=attempt retry_after=retry_after processed_at=processed_at
-- max_attempts: 3
-- dead_letter: table webhooks_dead
-- note: advisory keys are held in the consumer's process: run one consumer process per database file

-- name: schema
-- Creates the queue table, its dead-letter table and the index the claim reads, if missing.
CREATE TABLE IF NOT EXISTS "webhooks_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "processed_at" TEXT
);
CREATE INDEX IF NOT EXISTS "webhooks_queue_claim" ON "webhooks_queue" ("id") WHERE "processed_at" IS NULL;
CREATE TABLE IF NOT EXISTS "webhooks_dead" (
  "id" INTEGER PRIMARY KEY,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "processed_at" TEXT
);

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now.
INSERT INTO "webhooks_queue" ("payload", "retry_after")
VALUES (:payload, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'))
RETURNING "id" AS id;

-- name: claim
-- Lists up to scan ready rows; the runtime keeps the first limit whose keys (held in its process) are free.
SELECT "id" AS id
FROM "webhooks_queue"
WHERE "processed_at" IS NULL
  AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
ORDER BY "id"
LIMIT :scan;

-- name: take
-- Under their keys: re-reads which of the rows ids (a JSON array) are still claimable and counts their attempt; a row not returned was settled since the claim (unlock it).
UPDATE "webhooks_queue"
SET "attempt" = "attempt" + 1
WHERE "processed_at" IS NULL
  AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j)
RETURNING "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt;

-- name: ack
-- Finishes the row: marks it processed.
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: retry_after
-- Returns the row delay_s seconds from now (the take already counted the attempt); then unlock.
UPDATE "webhooks_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds')
WHERE "id" = :id;

-- name: dead_letter
-- At the cap: moves the row into webhooks_dead, payload and count kept (a copy, then a delete, in one transaction).
INSERT INTO "webhooks_dead" ("id", "payload", "attempt", "retry_after", "processed_at")
SELECT "id", "payload", "attempt", "retry_after", "processed_at"
FROM "webhooks_queue"
WHERE "id" = :id;
DELETE FROM "webhooks_queue"
WHERE "id" = :id;

-- name: unclaim
-- Under its key: undoes the take's count of a row whose handler never started (the consumer stopped); then unlock.
UPDATE "webhooks_queue"
SET "attempt" = "attempt" - 1
WHERE "id" = :id;
