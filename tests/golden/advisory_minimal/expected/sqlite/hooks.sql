-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "hooks"
-- dialect: "sqlite"
-- form: "advisory"
-- table: "hooks"
-- columns: {"id": "id", "payload": "payload"}
-- max_attempts: null
-- dead_letter: null
-- note: "advisory keys are held in the consumer's process: run one consumer process per database file"
-- seal: sha256:517605c665aec77687d9c7be275d4cda12f3c0fa1e57a8e727b9e6d624f2a6f5

-- name: schema
-- Creates the queue table, if missing.
-- kinds: writes
CREATE TABLE IF NOT EXISTS "hooks" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL
);

-- name: enqueue
-- Adds one message.
-- kinds: writes-returning
INSERT INTO "hooks" ("payload")
VALUES (:payload)
RETURNING "id" AS id;

-- name: claim
-- Lists up to scan ready rows; the runtime keeps the first limit whose keys (held in its process) are free.
-- kinds: reads
SELECT "id" AS id
FROM "hooks"
ORDER BY "id"
LIMIT :scan;

-- name: take
-- Under their keys: re-reads which of the rows ids (a JSON array) are still claimable; a row not returned was settled since the claim (unlock it).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload
FROM "hooks"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM "hooks"
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM "hooks"
WHERE "id" = :id;
