-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "tasks"
-- dialect: "sqlite"
-- form: "lease"
-- table: "tasks"
-- columns: {"id": "id", "payload": "payload", "group": "lane", "attempt": "attempt", "retry_after": "retry_after", "locked_until": "locked_until"}
-- max_attempts: 2
-- dead_letter: {"group": "tasks_dead"}
-- lease_s: 60
-- default_group: "tasks"
-- pause_table: "tasks_pause"
-- seal: sha256:f4e09ac98c19aa3de966f6c8364b6ca28dd9187e394504b54aaf365afcbd52d8

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS "tasks" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "lane" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "locked_until" TEXT
);
CREATE INDEX IF NOT EXISTS "tasks_claim" ON "tasks" ("lane", "id");
CREATE TABLE IF NOT EXISTS "tasks_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now.
-- kinds: writes-returning
INSERT INTO "tasks" ("payload", "lane", "retry_after")
VALUES (:payload, :group, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'))
RETURNING "id" AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -((julianday('now') - julianday(MIN("retry_after"))) * 86400.0) AS due_s
FROM "tasks"
WHERE "lane" = :group
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: claim
-- Leases up to limit ready rows (free or expired) for lease_s seconds, counting the attempt; the expiry is the token.
-- kinds: writes-returning
UPDATE "tasks"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds'), "attempt" = "attempt" + 1
WHERE "id" IN (
  SELECT "id"
  FROM "tasks"
  WHERE "lane" = :group
    AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND NOT EXISTS (
      SELECT 1
      FROM "tasks_pause" AS qgen_paused
      WHERE qgen_paused.queue_table = 'tasks'
        AND qgen_paused.queue_group IN ('', :group)
    )
  ORDER BY "id"
  LIMIT :limit
)
RETURNING "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt, "lane" AS "group", "locked_until" AS token;

-- name: extend
-- Moves a held lease lease_s seconds past now; the new expiry is the new token (no row: the lease was lost).
-- kinds: writes-returning
UPDATE "tasks"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "id" = :id AND "locked_until" = :token
RETURNING "locked_until" AS new_token;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM "tasks"
WHERE "id" = :id AND "locked_until" = :token;

-- name: drop
-- The table's own statement for drop (declared in statements.drop).
-- kinds: writes
UPDATE tasks SET lane = 'tasks_poison', locked_until = NULL WHERE id = :id AND locked_until = :token;

-- name: retry
-- Returns the row at once by clearing its lease (the claim already counted the attempt).
-- kinds: writes
UPDATE "tasks"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: retry_after
-- The table's own statement for retry_after (declared in statements.retry_after).
-- kinds: writes
UPDATE tasks SET retry_after = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || (:delay_s * 2) || ' seconds'), locked_until = NULL WHERE id = :id AND locked_until = :token;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: deletes them; the ids it finished (a pair missing lost its lease).
-- kinds: writes-returning
DELETE FROM "tasks"
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; the ids it returned.
-- kinds: writes-returning
UPDATE "tasks"
SET "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: dead_letter_many
-- At the cap: sets the group of the rows of pairs that still hold their token to the dead-letter group and clears their lease; the ids it moved.
-- kinds: writes-returning
UPDATE "tasks"
SET "lane" = :dead_group, "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: dead_letter
-- At the cap: sets the row's group to the dead-letter group, lease cleared.
-- kinds: writes
UPDATE "tasks"
SET "lane" = :dead_group, "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE "tasks"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared and the claim's count undone.
-- kinds: writes
UPDATE "tasks"
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now), delayed (retry_after in the future), in_flight (a lease in the future), dead (in the dead letter, counted up to count_limit rows), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", qgen_live.qgen_delayed AS "delayed", qgen_live.qgen_in_flight AS "in_flight", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM "tasks"
    WHERE "lane" = :dead_group
    LIMIT :count_limit
  ) AS qgen_dead
) AS "dead", NULL AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "tasks_pause"
  WHERE queue_table = 'tasks'
    AND queue_group IN ('', :group)
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now')) AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_delayed,
    COALESCE(SUM(CASE WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_in_flight
  FROM (
    SELECT "id", "retry_after", "locked_until"
    FROM "tasks"
    WHERE "lane" = :group
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; running: a lease in the future; pending otherwise), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "lane" = :dead_group THEN 'dead' WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 'running' ELSE 'pending' END AS "state", "attempt" - 1 AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "tasks"
WHERE "id" = :id;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "lane" AS "group"
FROM "tasks"
WHERE "lane" = :dead_group
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "lane" AS "group"
FROM "tasks"
WHERE "lane" = :dead_group
  AND "id" < :after_id
ORDER BY "id" DESC
LIMIT :limit;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "lane" AS "group"
FROM "tasks"
WHERE "lane" = :dead_group
  AND "id" = :id;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to the live group (group) as first deliveries (attempt 1, no delay, no lease).
-- kinds: writes
UPDATE "tasks"
SET "lane" = :group, "attempt" = 1, "retry_after" = NULL, "locked_until" = NULL
WHERE "lane" = :dead_group
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes
UPDATE "tasks"
SET "lane" = :group, "attempt" = 1, "retry_after" = NULL, "locked_until" = NULL
WHERE "lane" = :dead_group;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM "tasks"
WHERE "lane" = :dead_group
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM "tasks"
WHERE "lane" = :dead_group;

-- name: pause
-- Pauses tasks for group ('': every group): no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "tasks_pause" (queue_table, queue_group, paused_at)
VALUES ('tasks', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes tasks for group ('': the pause of every group; a group paused on its own stays paused): the next claim lists its rows again.
-- kinds: writes
DELETE FROM "tasks_pause"
WHERE queue_table = 'tasks'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of tasks ("group" '': every group) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "tasks_pause"
WHERE queue_table = 'tasks'
ORDER BY queue_group;

-- name: groups
-- Counts the unfinished rows of each group of the table, for `qgen verify`: rows in a group no declared queue claims (a queue renamed, its group with it) wait forever.
-- kinds: reads
SELECT "lane" AS "group", COUNT(*) AS pending
FROM "tasks"
GROUP BY "lane"
ORDER BY "lane";

-- name: group_names
-- Lists the groups of the table that hold unfinished rows, for the console's overview: one index probe per group (each the next group name above the last), where groups counts every row.
-- kinds: reads
WITH RECURSIVE qgen_groups AS (
  SELECT (
    SELECT "lane"
    FROM "tasks"
    ORDER BY "lane"
    LIMIT 1
  ) AS qgen_group
  UNION ALL
  SELECT (
    SELECT "lane"
    FROM "tasks"
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
UPDATE "tasks"
SET "lane" = :group
WHERE "lane" = :from_group;

-- name: pending_list
-- Lists up to limit pending messages of group (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "lane" AS "group", -((julianday('now') - julianday("retry_after")) * 86400.0) AS due_s
FROM "tasks"
WHERE "lane" = :group
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: advance
-- Brings the delayed messages of group (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE "tasks"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', "retry_after", '-' || :by_s || ' seconds')
WHERE "lane" = :group
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a lease in the future); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM "tasks"
WHERE "id" = :id AND "lane" <> :dead_group AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'));

-- name: custom.bump
-- The service's own event 'bump', run in place of the outcome's own statement.
-- kinds: writes
UPDATE tasks SET attempt = MAX(attempt - 1, 1), locked_until = NULL WHERE id = :id AND locked_until = :token;

-- name: custom.park
-- The service's own event 'park', run in place of the outcome's own statement.
-- kinds: writes writes
UPDATE tasks SET lane = 'tasks_parked', locked_until = NULL WHERE id = :id AND locked_until = :token;
INSERT INTO task_log (task_id, note) VALUES (:id, 'parked at 100%');
