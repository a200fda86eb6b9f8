-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "reports"
-- dialect: "sqlite"
-- form: "row_lock"
-- table: "reports_queue"
-- columns: {"id": "id", "payload": "payload", "group": "grp", "attempt": "attempt", "retry_after": "retry_after"}
-- max_attempts: 2
-- dead_letter: {"group": "reports_dead"}
-- default_group: "reports"
-- schedule_table: "reports_queue_schedules"
-- schedules: {"nightly": {"cron": "0 3 * * *", "timezone": "Europe/Paris", "payload": {"report": "daily"}, "catch_up": "latest", "catch_up_limit": 10}}
-- pause_table: "reports_queue_pause"
-- note: "BEGIN IMMEDIATE holds the database's write lock while the handler runs: correct but serial"
-- seal: sha256:475cddba4c60ea62f50ebbcb9eca93c2ab768f6f578be6f4cf6b59e4519e4b2e

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, the table that keeps each schedule's last slot, if missing.
-- kinds: writes writes writes writes
CREATE TABLE IF NOT EXISTS "reports_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "grp" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT
);
CREATE INDEX IF NOT EXISTS "reports_queue_claim" ON "reports_queue" ("grp", "id");
CREATE TABLE IF NOT EXISTS "reports_queue_schedules" (
  "queue" TEXT NOT NULL,
  "schedule" TEXT NOT NULL,
  "horizon" INTEGER NOT NULL,
  "last_slot" INTEGER,
  "paused" INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY ("queue", "schedule")
);
CREATE TABLE IF NOT EXISTS "reports_queue_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now.
-- kinds: writes-returning
INSERT INTO "reports_queue" ("payload", "grp", "retry_after")
VALUES (:payload, :group, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'))
RETURNING "id" AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -((julianday('now') - julianday(MIN("retry_after"))) * 86400.0) AS due_s
FROM "reports_queue"
WHERE "grp" = :group
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: claim
-- Counts the delivery of up to limit ready rows and commits it before they are handled (a delivery that kills its worker still counts), marking them not ready for hold_s seconds; take then locks them.
-- kinds: writes-returning
UPDATE "reports_queue"
SET "attempt" = "attempt" + 1, "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :hold_s || ' seconds')
WHERE "id" IN (
  SELECT "id"
  FROM "reports_queue"
  WHERE "grp" = :group
    AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND NOT EXISTS (
      SELECT 1
      FROM "reports_queue_pause" AS qgen_paused
      WHERE qgen_paused.queue_table = 'reports_queue'
        AND qgen_paused.queue_group IN ('', :group)
    )
  ORDER BY "id"
  LIMIT :limit
)
RETURNING "id" AS id;

-- name: take
-- In the batch's transaction: locks the rows ids (a JSON array) the claim counted until the transaction ends; it waits for a claim that holds one for an instant (its mark keeps every claim from taking it), so no counted row is left unhandled.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt, "grp" AS "group"
FROM "reports_queue"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j)
  AND "grp" = :group
ORDER BY "id";

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM "reports_queue"
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM "reports_queue"
WHERE "id" = :id;

-- name: retry
-- Returns the row at once by clearing the claim's mark (the claim already counted the attempt).
-- kinds: writes
UPDATE "reports_queue"
SET "retry_after" = NULL
WHERE "id" = :id;

-- name: retry_after
-- Returns the row delay_s seconds from now (the claim already counted the attempt).
-- kinds: writes
UPDATE "reports_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds')
WHERE "id" = :id;

-- name: ack_many
-- In the claim's transaction: finishes the rows ids (a JSON array): deletes them.
-- kinds: writes
DELETE FROM "reports_queue"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: drop_many
-- In the claim's transaction: finishes poison messages exactly as ack_many does.
-- kinds: writes
DELETE FROM "reports_queue"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: retry_many
-- In the claim's transaction: returns the rows ids at once by clearing the claim's mark (the claim already counted their attempt).
-- kinds: writes
UPDATE "reports_queue"
SET "retry_after" = NULL
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: retry_after_many
-- In the claim's transaction: returns the rows ids delay_s seconds from now.
-- kinds: writes
UPDATE "reports_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds')
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: dead_letter_many
-- In the claim's transaction: at the cap, sets the group of the rows ids to the dead-letter group.
-- kinds: writes
UPDATE "reports_queue"
SET "grp" = :dead_group, "retry_after" = NULL
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: dead_letter
-- At the cap: sets the row's group to the dead-letter group.
-- kinds: writes
UPDATE "reports_queue"
SET "grp" = :dead_group, "retry_after" = NULL
WHERE "id" = :id;

-- name: unclaim
-- In the batch's transaction: gives back a row whose handler never started (the consumer stops): the claim's count undone and its mark cleared.
-- kinds: writes
UPDATE "reports_queue"
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", qgen_live.qgen_delayed AS "delayed", NULL AS "in_flight", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM "reports_queue"
    WHERE "grp" = :dead_group
    LIMIT :count_limit
  ) AS qgen_dead
) AS "dead", NULL AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "reports_queue_pause"
  WHERE queue_table = 'reports_queue'
    AND queue_group IN ('', :group)
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT "id", "retry_after"
    FROM "reports_queue"
    WHERE "grp" = :group
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "grp" = :dead_group THEN 'dead' ELSE 'pending' END AS "state", "attempt" - 1 AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "reports_queue"
WHERE "id" = :id;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "grp" AS "group"
FROM "reports_queue"
WHERE "grp" = :dead_group
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "grp" AS "group"
FROM "reports_queue"
WHERE "grp" = :dead_group
  AND "id" < :after_id
ORDER BY "id" DESC
LIMIT :limit;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "grp" AS "group"
FROM "reports_queue"
WHERE "grp" = :dead_group
  AND "id" = :id;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to the live group (group) as first deliveries (attempt 1, no delay).
-- kinds: writes
UPDATE "reports_queue"
SET "grp" = :group, "attempt" = 1, "retry_after" = NULL
WHERE "grp" = :dead_group
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes
UPDATE "reports_queue"
SET "grp" = :group, "attempt" = 1, "retry_after" = NULL
WHERE "grp" = :dead_group;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM "reports_queue"
WHERE "grp" = :dead_group
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM "reports_queue"
WHERE "grp" = :dead_group;

-- name: pause
-- Pauses reports_queue for group ('': every group): no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "reports_queue_pause" (queue_table, queue_group, paused_at)
VALUES ('reports_queue', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes reports_queue for group ('': the pause of every group; a group paused on its own stays paused): the next claim lists its rows again.
-- kinds: writes
DELETE FROM "reports_queue_pause"
WHERE queue_table = 'reports_queue'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of reports_queue ("group" '': every group) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "reports_queue_pause"
WHERE queue_table = 'reports_queue'
ORDER BY queue_group;

-- name: groups
-- Counts the unfinished rows of each group of the table, for `qgen verify`: rows in a group no declared queue claims (a queue renamed, its group with it) wait forever.
-- kinds: reads
SELECT "grp" AS "group", COUNT(*) AS pending
FROM "reports_queue"
GROUP BY "grp"
ORDER BY "grp";

-- name: group_names
-- Lists the groups of the table that hold unfinished rows, for the console's overview: one index probe per group (each the next group name above the last), where groups counts every row.
-- kinds: reads
WITH RECURSIVE qgen_groups AS (
  SELECT (
    SELECT "grp"
    FROM "reports_queue"
    ORDER BY "grp"
    LIMIT 1
  ) AS qgen_group
  UNION ALL
  SELECT (
    SELECT "grp"
    FROM "reports_queue"
    WHERE "grp" > qgen_groups.qgen_group
    ORDER BY "grp"
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
UPDATE "reports_queue"
SET "grp" = :group
WHERE "grp" = :from_group;

-- name: pending_list
-- Lists up to limit pending messages of group (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "grp" AS "group", -((julianday('now') - julianday("retry_after")) * 86400.0) AS due_s
FROM "reports_queue"
WHERE "grp" = :group
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: advance
-- Brings the delayed messages of group (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE "reports_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', "retry_after", '-' || :by_s || ' seconds')
WHERE "grp" = :group
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: schedule_now
-- The database's clock as seconds since the Unix epoch (UTC): what the schedules' slots are compared with.
-- kinds: reads
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now_s;

-- name: schedule_state
-- Each schedule's state: every slot up to horizon is decided (fired or skipped), last_slot is the last one that fired, paused is 1 while paused.
-- kinds: reads
SELECT "schedule" AS schedule, "horizon" AS horizon, "last_slot" AS last_slot, "paused" AS paused
FROM "reports_queue_schedules"
WHERE "queue" = :queue
ORDER BY "schedule";

-- name: schedule_start
-- Adds a schedule's state the first time it is seen, horizon being the clock's second then (no earlier slot fires); a state already there is kept.
-- kinds: writes
INSERT INTO "reports_queue_schedules" ("queue", "schedule", "horizon", "paused")
VALUES (:queue, :schedule, :horizon, 0)
ON CONFLICT ("queue", "schedule") DO NOTHING;

-- name: schedule_fire
-- Decides a schedule's slots up to horizon if its horizon is still seen and it is not paused: the one row it changes entitles the caller to enqueue those slots' messages in the same transaction; no row, another scheduler did.
-- kinds: writes
UPDATE "reports_queue_schedules"
SET "horizon" = :horizon, "last_slot" = :last_slot
WHERE "queue" = :queue
  AND "schedule" = :schedule
  AND "horizon" = :seen
  AND "paused" = 0;

-- name: schedule_pause
-- Pauses (paused 1) or resumes (paused 0) a schedule; its horizon moves up to horizon, so the slots it was paused through never fire.
-- kinds: writes
UPDATE "reports_queue_schedules"
SET "paused" = :paused, "horizon" = CASE WHEN "horizon" < :horizon THEN :horizon ELSE "horizon" END
WHERE "queue" = :queue
  AND "schedule" = :schedule;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a claim's BEGIN IMMEDIATE holds the database: the cancel waits for its batch to end); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM "reports_queue"
WHERE "id" = :id AND "grp" <> :dead_group;

-- name: custom.defer
-- The service's own event 'defer', run in place of the outcome's own statement.
-- kinds: writes writes
UPDATE reports_queue SET grp = 'reports_later' WHERE id = :id;
UPDATE reports_queue SET attempt = 1 WHERE id = :id;
