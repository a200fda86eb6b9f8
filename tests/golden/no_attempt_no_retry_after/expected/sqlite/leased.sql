-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: leased
-- dialect: sqlite
-- form: lease
-- table: leased
-- columns: id=id payload=payload locked_until=locked_until
-- max_attempts: none
-- dead_letter: none
-- lease_s: 30

-- name: schema
-- Creates the queue table, if missing.
CREATE TABLE IF NOT EXISTS "leased" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "locked_until" TEXT
);

-- name: enqueue
-- Adds one message.
INSERT INTO "leased" ("payload")
VALUES (:payload)
RETURNING "id" AS id;

-- name: claim
-- Leases up to limit ready rows (free or expired) for lease_s seconds; the expiry is the token.
UPDATE "leased"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "id" IN (
  SELECT "id"
  FROM "leased"
  WHERE ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'))
  ORDER BY "id"
  LIMIT :limit
)
RETURNING "id" AS id, "payload" AS payload, "locked_until" AS token;

-- name: extend
-- Moves a held lease lease_s seconds past now; the new expiry is the new token (no row: the lease was lost).
UPDATE "leased"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "id" = :id AND "locked_until" = :token
RETURNING "locked_until" AS new_token;

-- name: ack
-- Finishes the row: deletes it.
DELETE FROM "leased"
WHERE "id" = :id AND "locked_until" = :token;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
DELETE FROM "leased"
WHERE "id" = :id AND "locked_until" = :token;

-- name: retry
-- Returns the row at once by clearing its lease.
UPDATE "leased"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
UPDATE "leased"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared.
UPDATE "leased"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;
