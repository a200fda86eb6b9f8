-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "tasks"
-- dialect: "sqlite"
-- form: "row_lock"
-- table: "tasks"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after", "dedupe_key": "dkey"}
-- max_attempts: 3
-- dead_letter: {"table": "tasks_dead"}
-- pause_table: "tasks_pause"
-- note: "BEGIN IMMEDIATE holds the database's write lock while the handler runs: correct but serial"
-- seal: sha256:7016b70ee2e3ea1fa384cdf3abb09185f5ba1946754ce6ef7dc6cf6048baf077

-- name: schema
-- Creates the queue table, its dead-letter table, the table of paused scopes, the unique index that keeps one pending message per dedupe_key, if missing.
-- kinds: writes writes writes writes
CREATE TABLE IF NOT EXISTS "tasks" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "dkey" TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS "tasks_dedupe" ON "tasks" ("dkey");
CREATE TABLE IF NOT EXISTS "tasks_dead" (
  "id" INTEGER PRIMARY KEY,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "dkey" TEXT
);
CREATE TABLE IF NOT EXISTS "tasks_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now; a dedupe_key a pending message already holds adds nothing and returns no new id (enqueue_existing reads the pending one).
-- kinds: writes-returning
INSERT INTO "tasks" ("payload", "retry_after", "dkey")
VALUES (:payload, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), :dedupe_key)
ON CONFLICT ("dkey") DO NOTHING
RETURNING "id" AS id;

-- name: enqueue_existing
-- Reads the id of the pending message (not processed, not dead) that holds dedupe_key: the one a duplicate enqueue returns.
-- kinds: reads
SELECT "id" AS id
FROM "tasks"
WHERE "dkey" = :dedupe_key;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -((julianday('now') - julianday(MIN("retry_after"))) * 86400.0) AS due_s
FROM "tasks"
WHERE "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: claim
-- Counts the delivery of up to limit ready rows and commits it before they are handled (a delivery that kills its worker still counts), marking them not ready for hold_s seconds; take then locks them.
-- kinds: writes-returning
UPDATE "tasks"
SET "attempt" = "attempt" + 1, "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :hold_s || ' seconds')
WHERE "id" IN (
  SELECT "id"
  FROM "tasks"
  WHERE ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND NOT EXISTS (
      SELECT 1
      FROM "tasks_pause" AS qgen_paused
      WHERE qgen_paused.queue_table = 'tasks'
        AND qgen_paused.queue_group = ''
    )
  ORDER BY "id"
  LIMIT :limit
)
RETURNING "id" AS id;

-- name: take
-- In the batch's transaction: locks the rows ids (a JSON array) the claim counted until the transaction ends; it waits for a claim that holds one for an instant (its mark keeps every claim from taking it), so no counted row is left unhandled.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt
FROM "tasks"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j)
ORDER BY "id";

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM "tasks"
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM "tasks"
WHERE "id" = :id;

-- name: retry
-- Returns the row at once by clearing the claim's mark (the claim already counted the attempt).
-- kinds: writes
UPDATE "tasks"
SET "retry_after" = NULL
WHERE "id" = :id;

-- name: retry_after
-- Returns the row delay_s seconds from now (the claim already counted the attempt).
-- kinds: writes
UPDATE "tasks"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds')
WHERE "id" = :id;

-- name: ack_many
-- In the claim's transaction: finishes the rows ids (a JSON array): deletes them.
-- kinds: writes
DELETE FROM "tasks"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: drop_many
-- In the claim's transaction: finishes poison messages exactly as ack_many does.
-- kinds: writes
DELETE FROM "tasks"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: retry_many
-- In the claim's transaction: returns the rows ids at once by clearing the claim's mark (the claim already counted their attempt).
-- kinds: writes
UPDATE "tasks"
SET "retry_after" = NULL
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: retry_after_many
-- In the claim's transaction: returns the rows ids delay_s seconds from now.
-- kinds: writes
UPDATE "tasks"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds')
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: dead_letter
-- At the cap: moves the row into tasks_dead, payload and count kept (a copy, then a delete, in one transaction).
-- kinds: writes writes
INSERT INTO "tasks_dead" ("id", "payload", "attempt", "retry_after", "dkey")
SELECT "id", "payload", "attempt", "retry_after", "dkey"
FROM "tasks"
WHERE "id" = :id;
DELETE FROM "tasks"
WHERE "id" = :id;

-- name: unclaim
-- In the batch's transaction: gives back a row whose handler never started (the consumer stops): the claim's count undone and its mark cleared.
-- kinds: writes
UPDATE "tasks"
SET "attempt" = "attempt" - 1, "retry_after" = NULL
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", qgen_live.qgen_delayed AS "delayed", NULL AS "in_flight", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM "tasks_dead"
    LIMIT :count_limit
  ) AS qgen_dead
) AS "dead", NULL AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "tasks_pause"
  WHERE queue_table = 'tasks'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT "id", "retry_after"
    FROM "tasks"
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, 'pending' AS "state", "attempt" - 1 AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "tasks"
WHERE "id" = :id
UNION ALL
SELECT "id" AS id, "payload" AS payload, 'dead' AS "state", "attempt" - 1 AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "tasks_dead"
WHERE "id" = :id;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "tasks_dead"
WHERE "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "tasks_dead"
WHERE "id" < :after_id
ORDER BY "id" DESC
LIMIT :limit;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "tasks_dead"
WHERE "id" = :id;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to tasks as first deliveries (attempt 1, no delay): moved, a copy then a delete in one transaction, so a message is never in both tables.
-- kinds: writes writes
INSERT INTO "tasks" ("id", "payload", "attempt", "retry_after", "dkey")
SELECT "id", "payload", 1, NULL, "dkey"
FROM "tasks_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);
DELETE FROM "tasks_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: redrive_blocked
-- The dead messages ids whose dedupe_key a pending message holds, or an older dead message sent back with them: redrive refuses them.
-- kinds: reads
SELECT d."id" AS id
FROM "tasks_dead" AS d
WHERE d."dkey" IS NOT NULL
  AND d."id" IN (SELECT j.value FROM json_each(:ids) AS j)
  AND (EXISTS (
    SELECT 1
    FROM "tasks" AS p
    WHERE p."dkey" = d."dkey"
  ) OR EXISTS (
    SELECT 1
    FROM "tasks_dead" AS o
    WHERE o."dkey" = d."dkey"
      AND o."id" < d."id"
      AND o."id" IN (SELECT j.value FROM json_each(:ids) AS j)
  ))
ORDER BY d."id";

-- name: redrive_blocked_all
-- The dead messages whose dedupe_key a pending message holds, or an older dead message sent back with them: redrive refuses them.
-- kinds: reads
SELECT d."id" AS id
FROM "tasks_dead" AS d
WHERE d."dkey" IS NOT NULL
  AND (EXISTS (
    SELECT 1
    FROM "tasks" AS p
    WHERE p."dkey" = d."dkey"
  ) OR EXISTS (
    SELECT 1
    FROM "tasks_dead" AS o
    WHERE o."dkey" = d."dkey"
      AND o."id" < d."id"
  ))
ORDER BY d."id";

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes writes
INSERT INTO "tasks" ("id", "payload", "attempt", "retry_after", "dkey")
SELECT "id", "payload", 1, NULL, "dkey"
FROM "tasks_dead";
DELETE FROM "tasks_dead";

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM "tasks_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM "tasks_dead";

-- name: pause
-- Pauses tasks: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "tasks_pause" (queue_table, queue_group, paused_at)
VALUES ('tasks', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes tasks: the next claim lists its rows again.
-- kinds: writes
DELETE FROM "tasks_pause"
WHERE queue_table = 'tasks'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of tasks ("group" '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "tasks_pause"
WHERE queue_table = 'tasks'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, -((julianday('now') - julianday("retry_after")) * 86400.0) AS due_s
FROM "tasks"
WHERE "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: advance
-- Brings the delayed messages (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE "tasks"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', "retry_after", '-' || :by_s || ' seconds')
WHERE "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a claim's BEGIN IMMEDIATE holds the database: the cancel waits for its batch to end); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM "tasks"
WHERE "id" = :id;
