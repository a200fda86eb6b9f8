-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "emails"
-- dialect: "sqlite"
-- form: "lease"
-- table: "emails_queue"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after", "locked_until": "locked_until", "progress": "progress"}
-- max_attempts: 3
-- dead_letter: {"table": "emails_dead"}
-- lease_s: 60
-- pause_table: "emails_queue_pause"
-- seal: sha256:bbf946c6157d8cbf5b312f54a74a73a6dc6d38cae6522eafdc17d751161008dd

-- name: schema
-- Creates the queue table, its dead-letter table, the table of paused scopes, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS "emails_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "locked_until" TEXT,
  "progress" TEXT
);
CREATE TABLE IF NOT EXISTS "emails_dead" (
  "id" INTEGER PRIMARY KEY,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "locked_until" TEXT,
  "progress" TEXT
);
CREATE TABLE IF NOT EXISTS "emails_queue_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now.
-- kinds: writes-returning
INSERT INTO "emails_queue" ("payload", "retry_after")
VALUES (:payload, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'))
RETURNING "id" AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -((julianday('now') - julianday(MIN("retry_after"))) * 86400.0) AS due_s
FROM "emails_queue"
WHERE "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: claim
-- Leases up to limit ready rows (free or expired) for lease_s seconds, counting the attempt; the expiry is the token.
-- kinds: writes-returning
UPDATE "emails_queue"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds'), "attempt" = "attempt" + 1
WHERE "id" IN (
  SELECT "id"
  FROM "emails_queue"
  WHERE ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND NOT EXISTS (
      SELECT 1
      FROM "emails_queue_pause" AS qgen_paused
      WHERE qgen_paused.queue_table = 'emails_queue'
        AND qgen_paused.queue_group = ''
    )
  ORDER BY "id"
  LIMIT :limit
)
RETURNING "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt, "locked_until" AS token;

-- name: extend
-- Moves a held lease lease_s seconds past now; the new expiry is the new token (no row: the lease was lost).
-- kinds: writes-returning
UPDATE "emails_queue"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "id" = :id AND "locked_until" = :token
RETURNING "locked_until" AS new_token;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM "emails_queue"
WHERE "id" = :id AND "locked_until" = :token;

-- name: progress
-- Records the running handler's progress (JSON) in progress, in a statement of its own, on the row while it still holds the delivery's token.
-- kinds: writes
UPDATE "emails_queue"
SET "progress" = :progress
WHERE "id" = :id AND "locked_until" = :token;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM "emails_queue"
WHERE "id" = :id AND "locked_until" = :token;

-- name: retry
-- Returns the row at once by clearing its lease (the claim already counted the attempt).
-- kinds: writes
UPDATE "emails_queue"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: retry_after
-- Returns the row delay_s seconds from now and clears its lease.
-- kinds: writes
UPDATE "emails_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: deletes them; the ids it finished (a pair missing lost its lease).
-- kinds: writes-returning
DELETE FROM "emails_queue"
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: drop_many
-- Finishes poison messages exactly as ack_many does: they leave the queue.
-- kinds: writes-returning
DELETE FROM "emails_queue"
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; the ids it returned.
-- kinds: writes-returning
UPDATE "emails_queue"
SET "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: retry_after_many
-- Returns the rows of pairs that still hold their token delay_s seconds from now and clears their lease; the ids it touched.
-- kinds: writes-returning
UPDATE "emails_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: dead_letter
-- At the cap: moves the row into emails_dead, payload and count kept (a copy, then a delete, in one transaction), lease cleared.
-- kinds: writes writes
INSERT INTO "emails_dead" ("id", "payload", "attempt", "retry_after", "locked_until", "progress")
SELECT "id", "payload", "attempt", "retry_after", NULL, "progress"
FROM "emails_queue"
WHERE "id" = :id AND "locked_until" = :token;
DELETE FROM "emails_queue"
WHERE "id" = :id AND "locked_until" = :token;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE "emails_queue"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared and the claim's count undone.
-- kinds: writes
UPDATE "emails_queue"
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

-- name: stats
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now), delayed (retry_after in the future), in_flight (a lease in the future), dead (in the dead letter, counted up to count_limit rows), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", qgen_live.qgen_delayed AS "delayed", qgen_live.qgen_in_flight AS "in_flight", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM "emails_dead"
    LIMIT :count_limit
  ) AS qgen_dead
) AS "dead", NULL AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "emails_queue_pause"
  WHERE queue_table = 'emails_queue'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now')) AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_delayed,
    COALESCE(SUM(CASE WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_in_flight
  FROM (
    SELECT "id", "retry_after", "locked_until"
    FROM "emails_queue"
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; running: a lease in the future; pending otherwise), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 'running' ELSE 'pending' END AS "state", "attempt" - 1 AS attempts, NULL AS "result", "progress" AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "emails_queue"
WHERE "id" = :id
UNION ALL
SELECT "id" AS id, "payload" AS payload, 'dead' AS "state", "attempt" - 1 AS attempts, NULL AS "result", "progress" AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "emails_dead"
WHERE "id" = :id;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "emails_dead"
WHERE "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "emails_dead"
WHERE "id" < :after_id
ORDER BY "id" DESC
LIMIT :limit;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "emails_dead"
WHERE "id" = :id;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to emails_queue as first deliveries (attempt 1, no delay, no lease): moved, a copy then a delete in one transaction, so a message is never in both tables.
-- kinds: writes writes
INSERT INTO "emails_queue" ("id", "payload", "attempt", "retry_after", "locked_until", "progress")
SELECT "id", "payload", 1, NULL, NULL, "progress"
FROM "emails_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);
DELETE FROM "emails_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes writes
INSERT INTO "emails_queue" ("id", "payload", "attempt", "retry_after", "locked_until", "progress")
SELECT "id", "payload", 1, NULL, NULL, "progress"
FROM "emails_dead";
DELETE FROM "emails_dead";

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM "emails_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM "emails_dead";

-- name: pause
-- Pauses emails_queue: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "emails_queue_pause" (queue_table, queue_group, paused_at)
VALUES ('emails_queue', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes emails_queue: the next claim lists its rows again.
-- kinds: writes
DELETE FROM "emails_queue_pause"
WHERE queue_table = 'emails_queue'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of emails_queue ("group" '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "emails_queue_pause"
WHERE queue_table = 'emails_queue'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, -((julianday('now') - julianday("retry_after")) * 86400.0) AS due_s
FROM "emails_queue"
WHERE "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: advance
-- Brings the delayed messages (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE "emails_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', "retry_after", '-' || :by_s || ' seconds')
WHERE "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a lease in the future); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM "emails_queue"
WHERE "id" = :id AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'));
