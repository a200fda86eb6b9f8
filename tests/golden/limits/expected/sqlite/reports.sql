-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "reports"
-- dialect: "sqlite"
-- form: "row_lock"
-- table: "reports_queue"
-- columns: {"id": "id", "payload": "payload", "group": "queue", "attempt": "attempt"}
-- max_attempts: null
-- dead_letter: null
-- default_group: "reports"
-- pause_table: "reports_queue_pause"
-- note: "BEGIN IMMEDIATE holds the database's write lock while the handler runs: correct but serial"
-- seal: sha256:7dd643e992293a4755df7f40265c464d0c7130675d8af3b8aadc3e6cfc9d8636

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS "reports_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "queue" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS "reports_queue_claim" ON "reports_queue" ("queue", "id");
CREATE TABLE IF NOT EXISTS "reports_queue_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message.
-- kinds: writes-returning
INSERT INTO "reports_queue" ("payload", "queue")
VALUES (:payload, :group)
RETURNING "id" AS id;

-- name: claim
-- Selects up to limit ready rows and locks them until the transaction ends; locked rows are skipped; at most 4 in flight: BEGIN IMMEDIATE holds the database while a batch runs, so it claims at most 4.
-- kinds: reads reads
SELECT MIN(:limit, 4) AS "limit";
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "queue" AS "group"
FROM "reports_queue"
WHERE "queue" = :group
  AND NOT EXISTS (
    SELECT 1
    FROM "reports_queue_pause" AS qgen_paused
    WHERE qgen_paused.queue_table = 'reports_queue'
      AND qgen_paused.queue_group IN ('', :group)
  )
ORDER BY "id"
LIMIT :limit;

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
-- Returns the row at once, counting the attempt (without an attempt column the runtime rolls back instead).
-- kinds: writes
UPDATE "reports_queue"
SET "attempt" = "attempt" + 1
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
-- In the claim's transaction: returns the rows ids at once, counting their attempt.
-- kinds: writes
UPDATE "reports_queue"
SET "attempt" = "attempt" + 1
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (NULL: no dead letter), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", 0 AS "delayed", NULL AS "in_flight", NULL AS "dead", NULL AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "reports_queue_pause"
  WHERE queue_table = 'reports_queue'
    AND queue_group IN ('', :group)
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COUNT(*) AS qgen_ready
  FROM (
    SELECT "id"
    FROM "reports_queue"
    WHERE "queue" = :group
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, 'pending' AS "state", "attempt" - 1 AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "reports_queue"
WHERE "id" = :id;

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
SELECT "queue" AS "group", COUNT(*) AS pending
FROM "reports_queue"
GROUP BY "queue"
ORDER BY "queue";

-- name: group_names
-- Lists the groups of the table that hold unfinished rows, for the console's overview: one index probe per group (each the next group name above the last), where groups counts every row.
-- kinds: reads
WITH RECURSIVE qgen_groups AS (
  SELECT (
    SELECT "queue"
    FROM "reports_queue"
    ORDER BY "queue"
    LIMIT 1
  ) AS qgen_group
  UNION ALL
  SELECT (
    SELECT "queue"
    FROM "reports_queue"
    WHERE "queue" > qgen_groups.qgen_group
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
UPDATE "reports_queue"
SET "queue" = :group
WHERE "queue" = :from_group;

-- name: pending_list
-- Lists up to limit pending messages of group (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "queue" AS "group"
FROM "reports_queue"
WHERE "queue" = :group
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a claim's BEGIN IMMEDIATE holds the database: the cancel waits for its batch to end); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM "reports_queue"
WHERE "id" = :id;
