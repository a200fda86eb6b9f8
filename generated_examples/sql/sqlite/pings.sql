-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: pings
-- dialect: sqlite
-- form: lease
-- table: pings
-- columns: id=ping_id payload=data locked_until=leased_until
-- max_attempts: none
-- dead_letter: none
-- lease_s: 10

-- name: schema
-- Creates the queue table, if missing.
CREATE TABLE IF NOT EXISTS "pings" (
  "ping_id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "data" TEXT NOT NULL,
  "leased_until" TEXT
);

-- name: enqueue
-- Adds one message.
INSERT INTO "pings" ("data")
VALUES (:payload)
RETURNING "ping_id" AS id;

-- name: claim
-- Leases up to limit ready rows (free or expired) for lease_s seconds; the expiry is the token.
UPDATE "pings"
SET "leased_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "ping_id" IN (
  SELECT "ping_id"
  FROM "pings"
  WHERE ("leased_until" IS NULL OR "leased_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'))
  ORDER BY "ping_id"
  LIMIT :limit
)
RETURNING "ping_id" AS id, "data" AS payload, "leased_until" AS token;

-- name: extend
-- Moves a held lease lease_s seconds past now; the new expiry is the new token (no row: the lease was lost).
UPDATE "pings"
SET "leased_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "ping_id" = :id AND "leased_until" = :token
RETURNING "leased_until" AS new_token;

-- name: ack
-- Finishes the row: deletes it.
DELETE FROM "pings"
WHERE "ping_id" = :id AND "leased_until" = :token;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
DELETE FROM "pings"
WHERE "ping_id" = :id AND "leased_until" = :token;

-- name: retry
-- Returns the row at once by clearing its lease.
UPDATE "pings"
SET "leased_until" = NULL
WHERE "ping_id" = :id AND "leased_until" = :token;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
UPDATE "pings"
SET "leased_until" = NULL
WHERE "ping_id" = :id AND "leased_until" = :token;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared.
UPDATE "pings"
SET "leased_until" = NULL
WHERE "ping_id" = :id AND "leased_until" = :token;
