-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "reports"
-- dialect: "sqlite"
-- form: "row_lock"
-- table: "reports_queue"
-- columns: {"id": "id", "payload": "payload", "group": "grp", "attempt": "attempt", "retry_after": "retry_after"}
-- max_attempts: 2
-- dead_letter: {"group": "reports_dead"}
-- default_group: "reports"
-- pause_table: "reports_queue_pause"
-- note: "BEGIN IMMEDIATE holds the database's write lock while the handler runs: correct but serial"
-- seal: sha256:40eaf0b8585cfc602305549b824b4e7500e36ff3f749941a8b84eef5606fa7a3

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS "reports_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "grp" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT
);
CREATE INDEX IF NOT EXISTS "reports_queue_claim" ON "reports_queue" ("grp", "id");
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
-- Selects up to limit ready rows and locks them until the transaction ends; locked rows are skipped.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, "grp" AS "group"
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

-- name: retry_after
-- Returns the row delay_s seconds from now, counting the attempt.
-- kinds: writes
UPDATE "reports_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "attempt" = "attempt" + 1
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

-- name: retry_after_many
-- In the claim's transaction: returns the rows ids delay_s seconds from now, counting their attempt.
-- kinds: writes
UPDATE "reports_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "attempt" = "attempt" + 1
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: dead_letter_many
-- In the claim's transaction: at the cap, sets the group of the rows ids to the dead-letter group, counting their attempt.
-- kinds: writes
UPDATE "reports_queue"
SET "grp" = :dead_group, "attempt" = "attempt" + 1
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: dead_letter
-- At the cap: sets the row's group to the dead-letter group.
-- kinds: writes
UPDATE "reports_queue"
SET "grp" = :dead_group, "attempt" = "attempt" + 1
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
-- Counts the queue's rows by the database's clock: ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT (
  SELECT COUNT(*)
  FROM "reports_queue"
  WHERE "grp" = :group
    AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
) AS "ready", (
  SELECT COUNT(*)
  FROM "reports_queue"
  WHERE "grp" = :group
    AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now')
) AS "delayed", NULL AS "in_flight", (
  SELECT COUNT(*)
  FROM "reports_queue"
  WHERE "grp" = :dead_group
) AS "dead", NULL AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "reports_queue_pause"
  WHERE queue_table = 'reports_queue'
    AND queue_group IN ('', :group)
) AS paused;

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

-- name: regroup
-- Moves the unfinished rows of group from_group to group (`qgen regroup`): rows a renamed queue left behind.
-- kinds: writes
UPDATE "reports_queue"
SET "grp" = :group
WHERE "grp" = :from_group;

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
