-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "leased"
-- dialect: "sqlite"
-- form: "lease"
-- table: "leased"
-- columns: {"id": "id", "payload": "payload", "locked_until": "locked_until"}
-- max_attempts: null
-- dead_letter: null
-- lease_s: 30
-- pause_table: "leased_pause"
-- seal: sha256:48357282e5bcb6121731bda4ba69f03487ec4ba6be9a5ac89e990b187619e8d4

-- name: schema
-- Creates the queue table, the table of paused scopes, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS "leased" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "locked_until" TEXT
);
CREATE TABLE IF NOT EXISTS "leased_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message.
-- kinds: writes-returning
INSERT INTO "leased" ("payload")
VALUES (:payload)
RETURNING "id" AS id;

-- name: claim
-- Leases up to limit ready rows (free or expired) for lease_s seconds; the expiry is the token.
-- kinds: writes-returning
UPDATE "leased"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "id" IN (
  SELECT "id"
  FROM "leased"
  WHERE ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND NOT EXISTS (
      SELECT 1
      FROM "leased_pause" AS qgen_paused
      WHERE qgen_paused.queue_table = 'leased'
        AND qgen_paused.queue_group = ''
    )
  ORDER BY "id"
  LIMIT :limit
)
RETURNING "id" AS id, "payload" AS payload, "locked_until" AS token;

-- name: extend
-- Moves a held lease lease_s seconds past now; the new expiry is the new token (no row: the lease was lost).
-- kinds: writes-returning
UPDATE "leased"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "id" = :id AND "locked_until" = :token
RETURNING "locked_until" AS new_token;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM "leased"
WHERE "id" = :id AND "locked_until" = :token;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM "leased"
WHERE "id" = :id AND "locked_until" = :token;

-- name: retry
-- Returns the row at once by clearing its lease.
-- kinds: writes
UPDATE "leased"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: deletes them; the ids it finished (a pair missing lost its lease).
-- kinds: writes-returning
DELETE FROM "leased"
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: drop_many
-- Finishes poison messages exactly as ack_many does: they leave the queue.
-- kinds: writes-returning
DELETE FROM "leased"
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; the ids it returned.
-- kinds: writes-returning
UPDATE "leased"
SET "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE "leased"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared.
-- kinds: writes
UPDATE "leased"
SET "locked_until" = NULL
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

-- name: stats
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now), delayed (retry_after in the future), in_flight (a lease in the future), dead (NULL: no dead letter), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", 0 AS "delayed", qgen_live.qgen_in_flight AS "in_flight", NULL AS "dead", NULL AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "leased_pause"
  WHERE queue_table = 'leased'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_in_flight
  FROM (
    SELECT "id", "locked_until"
    FROM "leased"
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (running: a lease in the future; pending otherwise), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 'running' ELSE 'pending' END AS "state", NULL AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "leased"
WHERE "id" = :id;

-- name: pause
-- Pauses leased: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "leased_pause" (queue_table, queue_group, paused_at)
VALUES ('leased', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes leased: the next claim lists its rows again.
-- kinds: writes
DELETE FROM "leased_pause"
WHERE queue_table = 'leased'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of leased ("group" '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "leased_pause"
WHERE queue_table = 'leased'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload
FROM "leased"
WHERE "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a lease in the future); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM "leased"
WHERE "id" = :id AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'));
