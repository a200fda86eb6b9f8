-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "jobs"
-- dialect: "sqlite"
-- form: "lease"
-- table: "jobs"
-- columns: {"id": "id", "payload": "payload", "group": "queue", "attempt": "attempt", "retry_after": "retry_after", "locked_until": "locked_until", "processed_at": "processed_at"}
-- max_attempts: 3
-- dead_letter: {"group": "jobs_dead"}
-- lease_s: 15
-- default_group: "jobs"
-- seal: sha256:339d16fe1060750df8df1cb82694497c2df1ec2ce2c38723c31e8e5931752bef

-- name: schema
-- Creates the queue table and the index the claim reads, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS "jobs" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "queue" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "locked_until" TEXT,
  "processed_at" TEXT
);
CREATE INDEX IF NOT EXISTS "jobs_claim" ON "jobs" ("queue", "id") WHERE "processed_at" IS NULL;

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now.
-- kinds: writes-returning
INSERT INTO "jobs" ("payload", "queue", "retry_after")
VALUES (:payload, :group, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'))
RETURNING "id" AS id;

-- name: claim
-- Leases up to limit ready rows (free or expired) for lease_s seconds, counting the attempt; the expiry is the token.
-- kinds: writes-returning
UPDATE "jobs"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds'), "attempt" = "attempt" + 1
WHERE "id" IN (
  SELECT "id"
  FROM "jobs"
  WHERE "queue" = :group
    AND "processed_at" IS NULL
    AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'))
  ORDER BY "id"
  LIMIT :limit
)
RETURNING "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt, "queue" AS "group", "locked_until" AS token;

-- name: extend
-- Moves a held lease lease_s seconds past now; the new expiry is the new token (no row: the lease was lost).
-- kinds: writes-returning
UPDATE "jobs"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "id" = :id AND "locked_until" = :token
RETURNING "locked_until" AS new_token;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE "jobs"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE "jobs"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: retry
-- Returns the row at once by clearing its lease (the claim already counted the attempt).
-- kinds: writes
UPDATE "jobs"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: retry_after
-- Returns the row delay_s seconds from now and clears its lease.
-- kinds: writes
UPDATE "jobs"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: marks them processed; the ids it finished (a pair missing lost its lease).
-- kinds: writes-returning
UPDATE "jobs"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: drop_many
-- Finishes poison messages exactly as ack_many does: they leave the queue.
-- kinds: writes-returning
UPDATE "jobs"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; the ids it returned.
-- kinds: writes-returning
UPDATE "jobs"
SET "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: retry_after_many
-- Returns the rows of pairs that still hold their token delay_s seconds from now and clears their lease; the ids it touched.
-- kinds: writes-returning
UPDATE "jobs"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: dead_letter
-- At the cap: sets the row's group to the dead-letter group, lease cleared.
-- kinds: writes
UPDATE "jobs"
SET "queue" = :dead_group, "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE "jobs"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared and the claim's count undone.
-- kinds: writes
UPDATE "jobs"
SET "locked_until" = NULL, "attempt" = "attempt" - 1
WHERE "id" = :id AND "locked_until" = :token;

-- name: columns
-- Reads how the database describes a table's columns (table_name, in table_schema or the connection's own): for `qgen verify` and the consumer's start-up check.
-- kinds: reads
SELECT c.name AS name, c.type AS type, NOT c."notnull" AS nullable, c.dflt_value AS "default", c.pk = 1 AND upper(c.type) = 'INTEGER' AS "generated"
FROM pragma_table_info(:table_name, COALESCE(:table_schema, 'main')) AS c
ORDER BY c.cid;

-- name: indexes
-- Reads a table's indexes and their columns in order, for `qgen verify`.
-- kinds: reads
SELECT l.name AS name, (
  SELECT group_concat(name, ',') FROM (SELECT i.name FROM pragma_index_info(l.name, COALESCE(:table_schema, 'main')) AS i ORDER BY i.seqno)
) AS columns, l.partial AS partial
FROM pragma_index_list(:table_name, COALESCE(:table_schema, 'main')) AS l
ORDER BY l.name;
