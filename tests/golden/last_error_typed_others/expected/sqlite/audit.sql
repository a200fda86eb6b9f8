-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "audit"
-- dialect: "sqlite"
-- form: "row_lock"
-- table: "audit_queue"
-- columns: {"id": "id", "payload": "payload", "group": "queue", "attempt": "attempt", "retry_after": "retry_after", "processed_at": "processed_at", "last_error": "why"}
-- max_attempts: 5
-- dead_letter: {"group": "audit_dead"}
-- default_group: "audit"
-- other_columns: ["source"]
-- pause_table: "audit_queue_pause"
-- note: "BEGIN IMMEDIATE holds the database's write lock while the handler runs: correct but serial"
-- seal: sha256:bbf6dc51a6e2881f8a32922fad25c6afae258a595ad1a798886ebc4203b5e034

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, with the index prune and stats read over processed rows, if missing.
-- kinds: writes writes writes writes
CREATE TABLE IF NOT EXISTS "audit_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "queue" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "processed_at" TEXT,
  "why" TEXT,
  "source" TEXT
);
CREATE INDEX IF NOT EXISTS "audit_queue_claim" ON "audit_queue" ("queue", "id") WHERE "processed_at" IS NULL;
CREATE INDEX IF NOT EXISTS "audit_queue_processed" ON "audit_queue" ("queue", "processed_at", "id") WHERE "processed_at" IS NOT NULL;
CREATE TABLE IF NOT EXISTS "audit_queue_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now; value_<column> gives each other column its value.
-- kinds: writes-returning
INSERT INTO "audit_queue" ("payload", "queue", "retry_after", "source")
VALUES (:payload, :group, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), :value_source)
RETURNING "id" AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -((julianday('now') - julianday(MIN("retry_after"))) * 86400.0) AS due_s
FROM "audit_queue"
WHERE "queue" = :group
  AND "processed_at" IS NULL
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: claim
-- Counts the delivery of up to limit ready rows and commits it before they are handled (a delivery that kills its worker still counts), marking them not ready for hold_s seconds; take then locks them.
-- kinds: writes-returning
UPDATE "audit_queue"
SET "attempt" = "attempt" + 1, "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :hold_s || ' seconds')
WHERE "id" IN (
  SELECT "id"
  FROM "audit_queue"
  WHERE "queue" = :group
    AND "processed_at" IS NULL
    AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND NOT EXISTS (
      SELECT 1
      FROM "audit_queue_pause" AS qgen_paused
      WHERE qgen_paused.queue_table = 'audit_queue'
        AND qgen_paused.queue_group IN ('', :group)
    )
  ORDER BY "id"
  LIMIT :limit
)
RETURNING "id" AS id;

-- name: take
-- In the batch's transaction: locks the rows ids (a JSON array) the claim counted until the transaction ends; it waits for a claim that holds one for an instant (its mark keeps every claim from taking it), so no counted row is left unhandled.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt, "queue" AS "group"
FROM "audit_queue"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j)
  AND "processed_at" IS NULL
  AND "queue" = :group
ORDER BY "id";

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE "audit_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE "audit_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: retry
-- Returns the row at once by clearing the claim's mark (the claim already counted the attempt); records why in why.
-- kinds: writes
UPDATE "audit_queue"
SET "retry_after" = NULL, "why" = :error
WHERE "id" = :id;

-- name: retry_after
-- Returns the row delay_s seconds from now (the claim already counted the attempt); records why in why.
-- kinds: writes
UPDATE "audit_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "why" = :error
WHERE "id" = :id;

-- name: ack_many
-- In the claim's transaction: finishes the rows ids (a JSON array): marks them processed.
-- kinds: writes
UPDATE "audit_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: drop_many
-- In the claim's transaction: finishes poison messages exactly as ack_many does.
-- kinds: writes
UPDATE "audit_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: retry_many
-- In the claim's transaction: returns the rows ids at once by clearing the claim's mark (the claim already counted their attempt); records why in why.
-- kinds: writes
UPDATE "audit_queue"
SET "retry_after" = NULL, "why" = :error
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: retry_after_many
-- In the claim's transaction: returns the rows ids delay_s seconds from now; records why in why.
-- kinds: writes
UPDATE "audit_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "why" = :error
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: dead_letter_many
-- In the claim's transaction: at the cap, sets the group of the rows ids to the dead-letter group; records why in why.
-- kinds: writes
UPDATE "audit_queue"
SET "queue" = :dead_group, "retry_after" = NULL, "why" = :error
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: dead_letter
-- At the cap: sets the row's group to the dead-letter group; records why in why.
-- kinds: writes
UPDATE "audit_queue"
SET "queue" = :dead_group, "retry_after" = NULL, "why" = :error
WHERE "id" = :id;

-- name: unclaim
-- In the batch's transaction: gives back a row whose handler never started (the consumer stops): the claim's count undone and its mark cleared.
-- kinds: writes
UPDATE "audit_queue"
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (NULL: no enqueued_at column), last_error (why the newest unfinished row that failed failed) and dead_last_error (why the newest dead message died), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", qgen_live.qgen_delayed AS "delayed", NULL AS "in_flight", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM "audit_queue"
    WHERE "queue" = :dead_group
      AND "processed_at" IS NULL
    LIMIT :count_limit
  ) AS qgen_dead
) AS "dead", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM "audit_queue"
    WHERE "queue" = :group
      AND "processed_at" IS NOT NULL
    LIMIT :processed_limit
  ) AS qgen_kept
) AS "processed", NULL AS "oldest_ready_s", (
  SELECT "why"
  FROM "audit_queue"
  WHERE "queue" = :group
    AND "processed_at" IS NULL
    AND "why" IS NOT NULL
  ORDER BY "id" DESC
  LIMIT 1
) AS "last_error", (
  SELECT "why"
  FROM "audit_queue"
  WHERE "queue" = :dead_group
    AND "processed_at" IS NULL
    AND "why" IS NOT NULL
  ORDER BY "id" DESC
  LIMIT 1
) AS "dead_last_error", (
  SELECT COUNT(*)
  FROM "audit_queue_pause"
  WHERE queue_table = 'audit_queue'
    AND queue_group IN ('', :group)
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT "id", "retry_after"
    FROM "audit_queue"
    WHERE "queue" = :group
      AND "processed_at" IS NULL
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; done: marked processed; pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "queue" = :dead_group AND "processed_at" IS NULL THEN 'dead' WHEN "processed_at" IS NOT NULL THEN 'done' ELSE 'pending' END AS "state", "attempt" - 1 AS attempts, NULL AS "result", NULL AS "progress", "why" AS last_error, NULL AS enqueued_at, "processed_at" AS processed_at
FROM "audit_queue"
WHERE "id" = :id;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "queue" AS "group", "why" AS last_error
FROM "audit_queue"
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "queue" AS "group", "why" AS last_error
FROM "audit_queue"
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL
  AND "id" < :after_id
ORDER BY "id" DESC
LIMIT :limit;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "queue" AS "group", "why" AS last_error
FROM "audit_queue"
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL
  AND "id" = :id;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to the live group (group) as first deliveries (attempt 1, no delay).
-- kinds: writes
UPDATE "audit_queue"
SET "queue" = :group, "attempt" = 1, "retry_after" = NULL
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes
UPDATE "audit_queue"
SET "queue" = :group, "attempt" = 1, "retry_after" = NULL
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM "audit_queue"
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM "audit_queue"
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL;

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM "audit_queue"
WHERE "id" IN (
  SELECT "id"
  FROM "audit_queue"
  WHERE "queue" = :group
    AND "processed_at" < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :age_s || ' seconds')
  ORDER BY "processed_at", "id"
  LIMIT :batch
);

-- name: pause
-- Pauses audit_queue for group ('': every group): no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "audit_queue_pause" (queue_table, queue_group, paused_at)
VALUES ('audit_queue', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes audit_queue for group ('': the pause of every group; a group paused on its own stays paused): the next claim lists its rows again.
-- kinds: writes
DELETE FROM "audit_queue_pause"
WHERE queue_table = 'audit_queue'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of audit_queue ("group" '': every group) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "audit_queue_pause"
WHERE queue_table = 'audit_queue'
ORDER BY queue_group;

-- name: groups
-- Counts the unfinished rows of each group of the table, for `qgen verify`: rows in a group no declared queue claims (a queue renamed, its group with it) wait forever.
-- kinds: reads
SELECT "queue" AS "group", COUNT(*) AS pending
FROM "audit_queue"
WHERE "processed_at" IS NULL
GROUP BY "queue"
ORDER BY "queue";

-- name: group_names
-- Lists the groups of the table that hold unfinished rows, for the console's overview: one index probe per group (each the next group name above the last), where groups counts every row.
-- kinds: reads
WITH RECURSIVE qgen_groups AS (
  SELECT (
    SELECT "queue"
    FROM "audit_queue"
    WHERE "processed_at" IS NULL
    ORDER BY "queue"
    LIMIT 1
  ) AS qgen_group
  UNION ALL
  SELECT (
    SELECT "queue"
    FROM "audit_queue"
    WHERE "processed_at" IS NULL
      AND "queue" > qgen_groups.qgen_group
    ORDER BY "queue"
    LIMIT 1
  ) AS qgen_group
  FROM qgen_groups
  WHERE qgen_groups.qgen_group IS NOT NULL
)
SELECT qgen_group AS "group"
FROM qgen_groups
WHERE qgen_group IS NOT NULL;

-- name: regroup
-- Moves the unfinished rows of group from_group to group (`qgen regroup`): rows a renamed queue left behind.
-- kinds: writes
UPDATE "audit_queue"
SET "queue" = :group
WHERE "queue" = :from_group
  AND "processed_at" IS NULL;

-- name: pending_list
-- Lists up to limit pending messages of group (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "queue" AS "group", "why" AS last_error, -((julianday('now') - julianday("retry_after")) * 86400.0) AS due_s
FROM "audit_queue"
WHERE "queue" = :group
  AND "processed_at" IS NULL
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: advance
-- Brings the delayed messages of group (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE "audit_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', "retry_after", '-' || :by_s || ' seconds')
WHERE "queue" = :group
  AND "processed_at" IS NULL
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER) AS minute, COUNT(*) AS n
FROM "audit_queue"
WHERE "queue" = :group
  AND "processed_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
GROUP BY CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER)
ORDER BY minute;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (a claim's BEGIN IMMEDIATE holds the database: the cancel waits for its batch to end); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
UPDATE "audit_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id AND "processed_at" IS NULL AND "queue" <> :dead_group;
