-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "tasks"
-- dialect: "sqlite"
-- form: "lease"
-- table: "shop_tasks"
-- columns: {"id": "id", "payload": "payload", "group": "queue", "attempt": "attempt", "priority": "priority", "retry_after": "retry_after", "locked_until": "locked_until", "processed_at": "processed_at", "enqueued_at": "enqueued_at", "last_error": "last_error", "result": "result"}
-- max_attempts: 2
-- dead_letter: {"group": "tasks_dead"}
-- lease_s: 60
-- default_group: "tasks"
-- pause_table: "shop_tasks_pause"
-- seal: sha256:58630b21196ae15fa635db893cec22148b67a7e3453e87d701b595742286bbbd

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, with the index prune and stats read over processed rows, the index the console's per-minute chart counts enqueued rows by, if missing.
-- kinds: writes writes writes writes writes
CREATE TABLE IF NOT EXISTS "shop_tasks" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "queue" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "locked_until" TEXT,
  "processed_at" TEXT,
  "enqueued_at" TEXT,
  "priority" INTEGER NOT NULL DEFAULT 0,
  "last_error" TEXT,
  "result" TEXT
);
CREATE INDEX IF NOT EXISTS "shop_tasks_claim" ON "shop_tasks" ("queue", "priority" DESC, "id") WHERE "processed_at" IS NULL;
CREATE INDEX IF NOT EXISTS "shop_tasks_processed" ON "shop_tasks" ("queue", "processed_at", "id") WHERE "processed_at" IS NOT NULL;
CREATE INDEX IF NOT EXISTS "shop_tasks_enqueued" ON "shop_tasks" ("queue", "enqueued_at") WHERE "processed_at" IS NULL;
CREATE TABLE IF NOT EXISTS "shop_tasks_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message stamped with the database's clock; a non-NULL delay_s makes it claimable only that many seconds from now; priority orders the claim (higher first; NULL: 0).
-- kinds: writes-returning
INSERT INTO "shop_tasks" ("payload", "queue", "retry_after", "enqueued_at", "priority")
VALUES (:payload, :group, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), strftime('%Y-%m-%d %H:%M:%f', 'now'), COALESCE(:priority, 0))
RETURNING "id" AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -((julianday('now') - julianday(MIN("retry_after"))) * 86400.0) AS due_s
FROM "shop_tasks"
WHERE "queue" = :group
  AND "processed_at" IS NULL
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: claim
-- Leases up to limit ready rows (free or expired) for lease_s seconds, counting the attempt; the expiry is the token.
-- kinds: writes-returning
UPDATE "shop_tasks"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds'), "attempt" = "attempt" + 1
WHERE "id" IN (
  SELECT "id"
  FROM "shop_tasks"
  WHERE "queue" = :group
    AND "processed_at" IS NULL
    AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND NOT EXISTS (
      SELECT 1
      FROM "shop_tasks_pause" AS qgen_paused
      WHERE qgen_paused.queue_table = 'shop_tasks'
        AND qgen_paused.queue_group IN ('', :group)
    )
  ORDER BY "priority" DESC, "id"
  LIMIT :limit
)
RETURNING "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt, "queue" AS "group", "locked_until" AS token;

-- name: extend
-- Moves a held lease lease_s seconds past now; the new expiry is the new token (no row: the lease was lost).
-- kinds: writes-returning
UPDATE "shop_tasks"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "id" = :id AND "locked_until" = :token
RETURNING "locked_until" AS new_token;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE "shop_tasks"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: ack_result
-- Finishes the row as ack does (marks it processed) and keeps the handler's result (JSON) in result until the row is pruned.
-- kinds: writes
UPDATE "shop_tasks"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL, "result" = :result
WHERE "id" = :id AND "locked_until" = :token;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE "shop_tasks"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: retry
-- Returns the row at once by clearing its lease (the claim already counted the attempt); records why in last_error.
-- kinds: writes
UPDATE "shop_tasks"
SET "locked_until" = NULL, "last_error" = :error
WHERE "id" = :id AND "locked_until" = :token;

-- name: retry_after
-- Returns the row delay_s seconds from now and clears its lease; records why in last_error.
-- kinds: writes
UPDATE "shop_tasks"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "locked_until" = NULL, "last_error" = :error
WHERE "id" = :id AND "locked_until" = :token;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: marks them processed; the ids it finished (a pair missing lost its lease).
-- kinds: writes-returning
UPDATE "shop_tasks"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: drop_many
-- Finishes poison messages exactly as ack_many does: they leave the queue.
-- kinds: writes-returning
UPDATE "shop_tasks"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; records why in last_error; the ids it returned.
-- kinds: writes-returning
UPDATE "shop_tasks"
SET "locked_until" = NULL, "last_error" = :error
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: retry_after_many
-- Returns the rows of pairs that still hold their token delay_s seconds from now and clears their lease; records why in last_error; the ids it touched.
-- kinds: writes-returning
UPDATE "shop_tasks"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "locked_until" = NULL, "last_error" = :error
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: dead_letter_many
-- At the cap: sets the group of the rows of pairs that still hold their token to the dead-letter group and clears their lease; records why in last_error; the ids it moved.
-- kinds: writes-returning
UPDATE "shop_tasks"
SET "queue" = :dead_group, "locked_until" = NULL, "last_error" = :error
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: dead_letter
-- At the cap: sets the row's group to the dead-letter group, lease cleared; records why in last_error.
-- kinds: writes
UPDATE "shop_tasks"
SET "queue" = :dead_group, "locked_until" = NULL, "last_error" = :error
WHERE "id" = :id AND "locked_until" = :token;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE "shop_tasks"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared and the claim's count undone.
-- kinds: writes
UPDATE "shop_tasks"
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now), delayed (retry_after in the future), in_flight (a lease in the future), dead (in the dead letter, counted up to count_limit rows), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (seconds since the first ready row in id order was enqueued), last_error (why the newest unfinished row that failed failed) and dead_last_error (why the newest dead message died), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", qgen_live.qgen_delayed AS "delayed", qgen_live.qgen_in_flight AS "in_flight", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM "shop_tasks"
    WHERE "queue" = :dead_group
      AND "processed_at" IS NULL
    LIMIT :count_limit
  ) AS qgen_dead
) AS "dead", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM "shop_tasks"
    WHERE "queue" = :group
      AND "processed_at" IS NOT NULL
    LIMIT :processed_limit
  ) AS qgen_kept
) AS "processed", (
  SELECT (julianday('now') - julianday("enqueued_at")) * 86400.0
  FROM "shop_tasks"
  WHERE "queue" = :group
    AND "processed_at" IS NULL
    AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'))
  ORDER BY "id"
  LIMIT 1
) AS "oldest_ready_s", (
  SELECT "last_error"
  FROM "shop_tasks"
  WHERE "queue" = :group
    AND "processed_at" IS NULL
    AND "last_error" IS NOT NULL
  ORDER BY "id" DESC
  LIMIT 1
) AS "last_error", (
  SELECT "last_error"
  FROM "shop_tasks"
  WHERE "queue" = :dead_group
    AND "processed_at" IS NULL
    AND "last_error" IS NOT NULL
  ORDER BY "id" DESC
  LIMIT 1
) AS "dead_last_error", (
  SELECT COUNT(*)
  FROM "shop_tasks_pause"
  WHERE queue_table = 'shop_tasks'
    AND queue_group IN ('', :group)
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now')) AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_delayed,
    COALESCE(SUM(CASE WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_in_flight
  FROM (
    SELECT "id", "retry_after", "locked_until"
    FROM "shop_tasks"
    WHERE "queue" = :group
      AND "processed_at" IS NULL
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; done: marked processed; running: a lease in the future; pending otherwise), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "queue" = :dead_group AND "processed_at" IS NULL THEN 'dead' WHEN "processed_at" IS NOT NULL THEN 'done' WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 'running' ELSE 'pending' END AS "state", "attempt" - 1 AS attempts, "result" AS "result", NULL AS "progress", "last_error" AS last_error, "enqueued_at" AS enqueued_at, "processed_at" AS processed_at
FROM "shop_tasks"
WHERE "id" = :id;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "queue" AS "group", "enqueued_at" AS enqueued_at, "last_error" AS last_error
FROM "shop_tasks"
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "queue" AS "group", "enqueued_at" AS enqueued_at, "last_error" AS last_error
FROM "shop_tasks"
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL
  AND "id" < :after_id
ORDER BY "id" DESC
LIMIT :limit;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "queue" AS "group", "enqueued_at" AS enqueued_at, "last_error" AS last_error
FROM "shop_tasks"
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL
  AND "id" = :id;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to the live group (group) as first deliveries (attempt 1, no delay, no lease).
-- kinds: writes
UPDATE "shop_tasks"
SET "queue" = :group, "attempt" = 1, "retry_after" = NULL, "locked_until" = NULL
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes
UPDATE "shop_tasks"
SET "queue" = :group, "attempt" = 1, "retry_after" = NULL, "locked_until" = NULL
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM "shop_tasks"
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM "shop_tasks"
WHERE "queue" = :dead_group
  AND "processed_at" IS NULL;

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM "shop_tasks"
WHERE "id" IN (
  SELECT "id"
  FROM "shop_tasks"
  WHERE "queue" = :group
    AND "processed_at" < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :age_s || ' seconds')
  ORDER BY "processed_at", "id"
  LIMIT :batch
);

-- name: pause
-- Pauses shop_tasks for group ('': every group): no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "shop_tasks_pause" (queue_table, queue_group, paused_at)
VALUES ('shop_tasks', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes shop_tasks for group ('': the pause of every group; a group paused on its own stays paused): the next claim lists its rows again.
-- kinds: writes
DELETE FROM "shop_tasks_pause"
WHERE queue_table = 'shop_tasks'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of shop_tasks ("group" '': every group) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "shop_tasks_pause"
WHERE queue_table = 'shop_tasks'
ORDER BY queue_group;

-- name: groups
-- Counts the unfinished rows of each group of the table, for `qgen verify`: rows in a group no declared queue claims (a queue renamed, its group with it) wait forever.
-- kinds: reads
SELECT "queue" AS "group", COUNT(*) AS pending
FROM "shop_tasks"
WHERE "processed_at" IS NULL
GROUP BY "queue"
ORDER BY "queue";

-- name: group_names
-- Lists the groups of the table that hold unfinished rows, for the console's overview: one index probe per group (each the next group name above the last), where groups counts every row.
-- kinds: reads
WITH RECURSIVE qgen_groups AS (
  SELECT (
    SELECT "queue"
    FROM "shop_tasks"
    WHERE "processed_at" IS NULL
    ORDER BY "queue"
    LIMIT 1
  ) AS qgen_group
  UNION ALL
  SELECT (
    SELECT "queue"
    FROM "shop_tasks"
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
UPDATE "shop_tasks"
SET "queue" = :group
WHERE "queue" = :from_group
  AND "processed_at" IS NULL;

-- name: pending_list
-- Lists up to limit pending messages of group (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "queue" AS "group", "enqueued_at" AS enqueued_at, "last_error" AS last_error, -((julianday('now') - julianday("retry_after")) * 86400.0) AS due_s
FROM "shop_tasks"
WHERE "queue" = :group
  AND "processed_at" IS NULL
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: advance
-- Brings the delayed messages of group (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE "shop_tasks"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', "retry_after", '-' || :by_s || ' seconds')
WHERE "queue" = :group
  AND "processed_at" IS NULL
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER) AS minute, COUNT(*) AS n
FROM "shop_tasks"
WHERE "queue" = :group
  AND "processed_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
GROUP BY CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER)
ORDER BY minute;

-- name: enqueued_per_minute
-- Counts the rows enqueued in each minute of the last window_s seconds that the table still holds (unfinished, or processed in that window), for the console's chart.
-- kinds: reads
SELECT CAST((julianday('now') - julianday(e."enqueued_at")) * 1440 AS INTEGER) AS minute, COUNT(*) AS n
FROM (
  SELECT "enqueued_at"
  FROM "shop_tasks"
  WHERE "queue" = :group
    AND "processed_at" IS NULL
    AND "enqueued_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
  UNION ALL
  SELECT "enqueued_at"
  FROM "shop_tasks"
  WHERE "queue" = :group
    AND "processed_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
    AND "enqueued_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
) AS e
GROUP BY CAST((julianday('now') - julianday(e."enqueued_at")) * 1440 AS INTEGER)
ORDER BY minute;

-- name: ready_by_priority
-- Counts the ready rows (claimable now) of each priority, highest first, for the console's queue page.
-- kinds: reads
SELECT "priority" AS "priority", COUNT(*) AS ready
FROM "shop_tasks"
WHERE "queue" = :group
  AND "processed_at" IS NULL
  AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
  AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'))
GROUP BY "priority"
ORDER BY "priority" DESC;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (a lease in the future); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
UPDATE "shop_tasks"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE "id" = :id AND "processed_at" IS NULL AND "queue" <> :dead_group AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'));
