-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: hooks
-- dialect: sqlite
-- form: advisory
-- table: hooks
-- columns: id=id payload=payload
-- max_attempts: none
-- dead_letter: none
-- note: advisory keys are held in the consumer's process: run one consumer process per database file

-- name: schema
-- Creates the queue table, if missing.
CREATE TABLE IF NOT EXISTS "hooks" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL
);

-- name: enqueue
-- Adds one message.
INSERT INTO "hooks" ("payload")
VALUES (:payload)
RETURNING "id" AS id;

-- name: claim
-- Lists up to scan ready rows; the runtime keeps the first limit whose keys (held in its process) are free.
SELECT "id" AS id
FROM "hooks"
ORDER BY "id"
LIMIT :scan;

-- name: take
-- Under their keys: re-reads which of the rows ids (a JSON array) are still claimable; a row not returned was settled since the claim (unlock it).
SELECT "id" AS id, "payload" AS payload
FROM "hooks"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: ack
-- Finishes the row: deletes it.
DELETE FROM "hooks"
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
DELETE FROM "hooks"
WHERE "id" = :id;
