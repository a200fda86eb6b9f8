-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "exports"
-- dialect: "sqlite"
-- form: "advisory"
-- table: "exports_queue"
-- columns: {"id": "id", "payload": "payload", "group": "lane", "attempt": "attempt", "retry_after": "retry_after"}
-- max_attempts: 2
-- dead_letter: {"group": "exports_dead"}
-- default_group: "exports"
-- pause_table: "exports_queue_pause"
-- note: "advisory keys are held in the consumer's process: run one consumer process per database file"
-- seal: sha256:ed008d1c47246fcbaf39b545ee75a8e79ce5bec6a322c4a7667bd66a0e3013ae

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS "exports_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "lane" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT
);
CREATE INDEX IF NOT EXISTS "exports_queue_claim" ON "exports_queue" ("lane", "id");
CREATE TABLE IF NOT EXISTS "exports_queue_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now.
-- kinds: writes-returning
INSERT INTO "exports_queue" ("payload", "lane", "retry_after")
VALUES (:payload, :group, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'))
RETURNING "id" AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -((julianday('now') - julianday(MIN("retry_after"))) * 86400.0) AS due_s
FROM "exports_queue"
WHERE "lane" = :group
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: claim
-- Lists up to scan ready rows; the runtime keeps the first limit whose keys (held in its process) are free.
-- kinds: reads
SELECT "id" AS id
FROM "exports_queue"
WHERE "lane" = :group
  AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
  AND NOT EXISTS (
    SELECT 1
    FROM "exports_queue_pause" AS qgen_paused
    WHERE qgen_paused.queue_table = 'exports_queue'
      AND qgen_paused.queue_group IN ('', :group)
  )
ORDER BY "id"
LIMIT :scan;

-- name: take
-- Under their keys: re-reads which of the rows ids (a JSON array) are still claimable and counts their attempt; a row not returned was settled since the claim (unlock it).
-- kinds: writes-returning
UPDATE "exports_queue"
SET "attempt" = "attempt" + 1
WHERE "lane" = :group
  AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j)
RETURNING "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt, "lane" AS "group";

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM "exports_queue"
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM "exports_queue"
WHERE "id" = :id;

-- name: retry_after
-- The table's own statement for retry_after (declared in statements.retry_after).
-- kinds: writes
UPDATE exports_queue SET retry_after = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || (:delay_s * 2) || ' seconds') WHERE id = :id;

-- name: ack_many
-- Under their keys: finishes the rows ids (a JSON array): deletes them; then unlock.
-- kinds: writes
DELETE FROM "exports_queue"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: drop_many
-- Under their keys: finishes poison messages exactly as ack_many does; then unlock.
-- kinds: writes
DELETE FROM "exports_queue"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: dead_letter_many
-- Under their keys: at the cap, sets the group of the rows ids to the dead-letter group (the take already counted the attempt); then unlock.
-- kinds: writes
UPDATE "exports_queue"
SET "lane" = :dead_group
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: dead_letter
-- At the cap: sets the row's group to the dead-letter group.
-- kinds: writes
UPDATE "exports_queue"
SET "lane" = :dead_group
WHERE "id" = :id;

-- name: unclaim
-- Under its key: undoes the take's count of a row whose handler never started (the consumer stopped); then unlock.
-- kinds: writes
UPDATE "exports_queue"
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: advisory holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", qgen_live.qgen_delayed AS "delayed", NULL AS "in_flight", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM "exports_queue"
    WHERE "lane" = :dead_group
    LIMIT :count_limit
  ) AS qgen_dead
) AS "dead", NULL AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "exports_queue_pause"
  WHERE queue_table = 'exports_queue'
    AND queue_group IN ('', :group)
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT "id", "retry_after"
    FROM "exports_queue"
    WHERE "lane" = :group
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; pending otherwise, also while a consumer holds it: advisory holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "lane" = :dead_group THEN 'dead' ELSE 'pending' END AS "state", "attempt" - 1 AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "exports_queue"
WHERE "id" = :id;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "lane" AS "group"
FROM "exports_queue"
WHERE "lane" = :dead_group
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "lane" AS "group"
FROM "exports_queue"
WHERE "lane" = :dead_group
  AND "id" < :after_id
ORDER BY "id" DESC
LIMIT :limit;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "lane" AS "group"
FROM "exports_queue"
WHERE "lane" = :dead_group
  AND "id" = :id;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to the live group (group) as first deliveries (attempt 1, no delay).
-- kinds: writes
UPDATE "exports_queue"
SET "lane" = :group, "attempt" = 1, "retry_after" = NULL
WHERE "lane" = :dead_group
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes
UPDATE "exports_queue"
SET "lane" = :group, "attempt" = 1, "retry_after" = NULL
WHERE "lane" = :dead_group;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM "exports_queue"
WHERE "lane" = :dead_group
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM "exports_queue"
WHERE "lane" = :dead_group;

-- name: pause
-- Pauses exports_queue for group ('': every group): no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "exports_queue_pause" (queue_table, queue_group, paused_at)
VALUES ('exports_queue', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes exports_queue for group ('': the pause of every group; a group paused on its own stays paused): the next claim lists its rows again.
-- kinds: writes
DELETE FROM "exports_queue_pause"
WHERE queue_table = 'exports_queue'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of exports_queue ("group" '': every group) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "exports_queue_pause"
WHERE queue_table = 'exports_queue'
ORDER BY queue_group;

-- name: groups
-- Counts the unfinished rows of each group of the table, for `qgen verify`: rows in a group no declared queue claims (a queue renamed, its group with it) wait forever.
-- kinds: reads
SELECT "lane" AS "group", COUNT(*) AS pending
FROM "exports_queue"
GROUP BY "lane"
ORDER BY "lane";

-- name: group_names
-- Lists the groups of the table that hold unfinished rows, for the console's overview: one index probe per group (each the next group name above the last), where groups counts every row.
-- kinds: reads
WITH RECURSIVE qgen_groups AS (
  SELECT (
    SELECT "lane"
    FROM "exports_queue"
    ORDER BY "lane"
    LIMIT 1
  ) AS qgen_group
  UNION ALL
  SELECT (
    SELECT "lane"
    FROM "exports_queue"
    WHERE "lane" > qgen_groups.qgen_group
    ORDER BY "lane"
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
UPDATE "exports_queue"
SET "lane" = :group
WHERE "lane" = :from_group;

-- name: pending_list
-- Lists up to limit pending messages of group (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "lane" AS "group", -((julianday('now') - julianday("retry_after")) * 86400.0) AS due_s
FROM "exports_queue"
WHERE "lane" = :group
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: advance
-- Brings the delayed messages of group (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE "exports_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', "retry_after", '-' || :by_s || ' seconds')
WHERE "lane" = :group
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (the runtime checks the keys held in its own process first; another process's are not visible); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM "exports_queue"
WHERE "id" = :id AND "lane" <> :dead_group;
