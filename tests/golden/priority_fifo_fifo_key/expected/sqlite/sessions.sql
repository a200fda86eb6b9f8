-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "sessions"
-- dialect: "sqlite"
-- form: "advisory"
-- table: "sessions"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after", "fifo_key": "session"}
-- max_attempts: 3
-- dead_letter: {"table": "sessions_dead"}
-- pause_table: "sessions_pause"
-- note: "advisory keys are held in the consumer's process: run one consumer process per database file"
-- seal: sha256:47e5dce6ea8ec55a625dda250f4eae8fefd8e88c72d5bef86bdbefec65a928a6

-- name: schema
-- Creates the queue table, its dead-letter table, the table of paused scopes, and the index that finds a key's earlier rows, if missing.
-- kinds: writes writes writes writes
CREATE TABLE IF NOT EXISTS "sessions" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "session" TEXT
);
CREATE INDEX IF NOT EXISTS "sessions_fifo" ON "sessions" ("session", "id");
CREATE TABLE IF NOT EXISTS "sessions_dead" (
  "id" INTEGER PRIMARY KEY,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "session" TEXT
);
CREATE TABLE IF NOT EXISTS "sessions_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now; a non-NULL fifo_key delivers it after every earlier message of its key is finished.
-- kinds: writes-returning
INSERT INTO "sessions" ("payload", "retry_after", "session")
VALUES (:payload, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), :fifo_key)
RETURNING "id" AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -((julianday('now') - julianday(MIN("retry_after"))) * 86400.0) AS due_s
FROM "sessions"
WHERE "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: claim
-- Lists up to scan ready rows; the runtime keeps the first limit whose keys (held in its process) are free.
-- kinds: reads
SELECT "id" AS id
FROM "sessions"
WHERE ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
  AND NOT EXISTS (
    SELECT 1
    FROM "sessions" AS qgen_earlier
    WHERE qgen_earlier."session" = "sessions"."session"
      AND qgen_earlier."id" < "sessions"."id"
  )
  AND NOT EXISTS (
    SELECT 1
    FROM "sessions_pause" AS qgen_paused
    WHERE qgen_paused.queue_table = 'sessions'
      AND qgen_paused.queue_group = ''
  )
ORDER BY "id"
LIMIT :scan;

-- name: take
-- Under their keys: re-reads which of the rows ids (a JSON array) are still claimable and counts their attempt; a row not returned was settled since the claim (unlock it).
-- kinds: writes-returning
UPDATE "sessions"
SET "attempt" = "attempt" + 1
WHERE ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j)
RETURNING "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM "sessions"
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM "sessions"
WHERE "id" = :id;

-- name: retry_after
-- Returns the row delay_s seconds from now (the take already counted the attempt); then unlock.
-- kinds: writes
UPDATE "sessions"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds')
WHERE "id" = :id;

-- name: ack_many
-- Under their keys: finishes the rows ids (a JSON array): deletes them; then unlock.
-- kinds: writes
DELETE FROM "sessions"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: drop_many
-- Under their keys: finishes poison messages exactly as ack_many does; then unlock.
-- kinds: writes
DELETE FROM "sessions"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: retry_after_many
-- Under their keys: returns the rows ids delay_s seconds from now (the take already counted the attempt); then unlock.
-- kinds: writes
UPDATE "sessions"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds')
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: dead_letter
-- At the cap: moves the row into sessions_dead, payload and count kept (a copy, then a delete, in one transaction).
-- kinds: writes writes
INSERT INTO "sessions_dead" ("id", "payload", "attempt", "retry_after", "session")
SELECT "id", "payload", "attempt", "retry_after", "session"
FROM "sessions"
WHERE "id" = :id;
DELETE FROM "sessions"
WHERE "id" = :id;

-- name: unclaim
-- Under its key: undoes the take's count of a row whose handler never started (the consumer stopped); then unlock.
-- kinds: writes
UPDATE "sessions"
SET "attempt" = "attempt" - 1
WHERE "id" = :id;

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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: advisory holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", qgen_live.qgen_delayed AS "delayed", NULL AS "in_flight", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM "sessions_dead"
    LIMIT :count_limit
  ) AS qgen_dead
) AS "dead", NULL AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "sessions_pause"
  WHERE queue_table = 'sessions'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT "id", "retry_after"
    FROM "sessions"
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; pending otherwise, also while a consumer holds it: advisory holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, 'pending' AS "state", "attempt" - 1 AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "sessions"
WHERE "id" = :id
UNION ALL
SELECT "id" AS id, "payload" AS payload, 'dead' AS "state", "attempt" - 1 AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "sessions_dead"
WHERE "id" = :id;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "sessions_dead"
WHERE "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "sessions_dead"
WHERE "id" < :after_id
ORDER BY "id" DESC
LIMIT :limit;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "sessions_dead"
WHERE "id" = :id;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to sessions as first deliveries (attempt 1, no delay): moved, a copy then a delete in one transaction, so a message is never in both tables.
-- kinds: writes writes
INSERT INTO "sessions" ("id", "payload", "attempt", "retry_after", "session")
SELECT "id", "payload", 1, NULL, "session"
FROM "sessions_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);
DELETE FROM "sessions_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes writes
INSERT INTO "sessions" ("id", "payload", "attempt", "retry_after", "session")
SELECT "id", "payload", 1, NULL, "session"
FROM "sessions_dead";
DELETE FROM "sessions_dead";

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM "sessions_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM "sessions_dead";

-- name: pause
-- Pauses sessions: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "sessions_pause" (queue_table, queue_group, paused_at)
VALUES ('sessions', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes sessions: the next claim lists its rows again.
-- kinds: writes
DELETE FROM "sessions_pause"
WHERE queue_table = 'sessions'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of sessions ("group" '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "sessions_pause"
WHERE queue_table = 'sessions'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, -((julianday('now') - julianday("retry_after")) * 86400.0) AS due_s
FROM "sessions"
WHERE "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: advance
-- Brings the delayed messages (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE "sessions"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', "retry_after", '-' || :by_s || ' seconds')
WHERE "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: fifo_waiting
-- Lists up to limit fifo keys with unfinished rows waiting behind the key's head (its earliest unfinished row), most waiting first, for the console's queue page.
-- kinds: reads
SELECT "session" AS fifo_key, MIN("id") AS head_id, COUNT(*) - 1 AS waiting
FROM "sessions"
WHERE "session" IS NOT NULL
GROUP BY "session"
HAVING COUNT(*) > 1
ORDER BY waiting DESC, head_id
LIMIT :limit;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (the runtime checks the keys held in its own process first; another process's are not visible); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM "sessions"
WHERE "id" = :id;
