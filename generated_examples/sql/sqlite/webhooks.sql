-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "webhooks"
-- dialect: "sqlite"
-- form: "advisory"
-- table: "webhooks_queue"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after", "processed_at": "processed_at", "dedupe_key": "dedupe_key", "result": "outcome", "progress": "done_pct"}
-- max_attempts: 3
-- dead_letter: {"table": "webhooks_dead"}
-- pause_table: "webhooks_queue_pause"
-- note: "advisory keys are held in the consumer's process: run one consumer process per database file"
-- seal: sha256:a1810bdd51bb85524c875ef68fef917fb37c1db4afc73af1e5aadb5036c96e3b

-- name: schema
-- Creates the queue table, its dead-letter table, the table of paused scopes and the index the claim reads, with the index prune and stats read over processed rows, the unique index that keeps one pending message per dedupe_key, if missing.
-- kinds: writes writes writes writes writes writes
CREATE TABLE IF NOT EXISTS "webhooks_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "processed_at" TEXT,
  "dedupe_key" TEXT,
  "outcome" TEXT,
  "done_pct" TEXT
);
CREATE INDEX IF NOT EXISTS "webhooks_queue_claim" ON "webhooks_queue" ("id") WHERE "processed_at" IS NULL;
CREATE INDEX IF NOT EXISTS "webhooks_queue_processed" ON "webhooks_queue" ("processed_at", "id") WHERE "processed_at" IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS "webhooks_queue_dedupe" ON "webhooks_queue" ("dedupe_key") WHERE "processed_at" IS NULL;
CREATE TABLE IF NOT EXISTS "webhooks_dead" (
  "id" INTEGER PRIMARY KEY,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "processed_at" TEXT,
  "dedupe_key" TEXT,
  "outcome" TEXT,
  "done_pct" TEXT
);
CREATE TABLE IF NOT EXISTS "webhooks_queue_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now; a dedupe_key a pending message already holds adds nothing and returns no new id (enqueue_existing reads the pending one).
-- kinds: writes-returning
INSERT INTO "webhooks_queue" ("payload", "retry_after", "dedupe_key")
VALUES (:payload, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), :dedupe_key)
ON CONFLICT ("dedupe_key") WHERE "processed_at" IS NULL DO NOTHING
RETURNING "id" AS id;

-- name: enqueue_existing
-- Reads the id of the pending message (not processed, not dead) that holds dedupe_key: the one a duplicate enqueue returns.
-- kinds: reads
SELECT "id" AS id
FROM "webhooks_queue"
WHERE "dedupe_key" = :dedupe_key
  AND "processed_at" IS NULL;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -((julianday('now') - julianday(MIN("retry_after"))) * 86400.0) AS due_s
FROM "webhooks_queue"
WHERE "processed_at" IS NULL
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: claim
-- Lists up to scan ready rows; the runtime keeps the first limit whose keys (held in its process) are free.
-- kinds: reads
SELECT "id" AS id
FROM "webhooks_queue"
WHERE "processed_at" IS NULL
  AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
  AND NOT EXISTS (
    SELECT 1
    FROM "webhooks_queue_pause" AS qgen_paused
    WHERE qgen_paused.queue_table = 'webhooks_queue'
      AND qgen_paused.queue_group = ''
  )
ORDER BY "id"
LIMIT :scan;

-- name: take
-- Under their keys: re-reads which of the rows ids (a JSON array) are still claimable and counts their attempt; a row not returned was settled since the claim (unlock it).
-- kinds: writes-returning
UPDATE "webhooks_queue"
SET "attempt" = "attempt" + 1
WHERE "processed_at" IS NULL
  AND ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j)
RETURNING "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: ack_result
-- Finishes the row as ack does (marks it processed) and keeps the handler's result (JSON) in outcome until the row is pruned.
-- kinds: writes
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "outcome" = :result
WHERE "id" = :id;

-- name: progress
-- Records the running handler's progress (JSON) in done_pct, in a statement of its own, on the row whose key this connection holds.
-- kinds: writes
UPDATE "webhooks_queue"
SET "done_pct" = :progress
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: retry_after
-- Returns the row delay_s seconds from now (the take already counted the attempt); then unlock.
-- kinds: writes
UPDATE "webhooks_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds')
WHERE "id" = :id;

-- name: ack_many
-- Under their keys: finishes the rows ids (a JSON array): marks them processed; then unlock.
-- kinds: writes
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: drop_many
-- Under their keys: finishes poison messages exactly as ack_many does; then unlock.
-- kinds: writes
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: retry_after_many
-- Under their keys: returns the rows ids delay_s seconds from now (the take already counted the attempt); then unlock.
-- kinds: writes
UPDATE "webhooks_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds')
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: dead_letter
-- At the cap: moves the row into webhooks_dead, payload and count kept (a copy, then a delete, in one transaction).
-- kinds: writes writes
INSERT INTO "webhooks_dead" ("id", "payload", "attempt", "retry_after", "processed_at", "dedupe_key", "outcome", "done_pct")
SELECT "id", "payload", "attempt", "retry_after", "processed_at", "dedupe_key", "outcome", "done_pct"
FROM "webhooks_queue"
WHERE "id" = :id;
DELETE FROM "webhooks_queue"
WHERE "id" = :id;

-- name: unclaim
-- Under its key: undoes the take's count of a row whose handler never started (the consumer stopped); then unlock.
-- kinds: writes
UPDATE "webhooks_queue"
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: advisory holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", qgen_live.qgen_delayed AS "delayed", NULL AS "in_flight", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM "webhooks_dead"
    LIMIT :count_limit
  ) AS qgen_dead
) AS "dead", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM "webhooks_queue"
    WHERE "processed_at" IS NOT NULL
    LIMIT :processed_limit
  ) AS qgen_kept
) AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "webhooks_queue_pause"
  WHERE queue_table = 'webhooks_queue'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT "id", "retry_after"
    FROM "webhooks_queue"
    WHERE "processed_at" IS NULL
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; done: marked processed; pending otherwise, also while a consumer holds it: advisory holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "processed_at" IS NOT NULL THEN 'done' ELSE 'pending' END AS "state", "attempt" - 1 AS attempts, "outcome" AS "result", "done_pct" AS "progress", NULL AS last_error, NULL AS enqueued_at, "processed_at" AS processed_at
FROM "webhooks_queue"
WHERE "id" = :id
UNION ALL
SELECT "id" AS id, "payload" AS payload, 'dead' AS "state", "attempt" - 1 AS attempts, "outcome" AS "result", "done_pct" AS "progress", NULL AS last_error, NULL AS enqueued_at, "processed_at" AS processed_at
FROM "webhooks_dead"
WHERE "id" = :id;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "webhooks_dead"
WHERE "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "webhooks_dead"
WHERE "id" < :after_id
ORDER BY "id" DESC
LIMIT :limit;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "webhooks_dead"
WHERE "id" = :id;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to webhooks_queue as first deliveries (attempt 1, no delay): moved, a copy then a delete in one transaction, so a message is never in both tables.
-- kinds: writes writes
INSERT INTO "webhooks_queue" ("id", "payload", "attempt", "retry_after", "processed_at", "dedupe_key", "outcome", "done_pct")
SELECT "id", "payload", 1, NULL, "processed_at", "dedupe_key", "outcome", "done_pct"
FROM "webhooks_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);
DELETE FROM "webhooks_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: redrive_blocked
-- The dead messages ids whose dedupe_key a pending message holds, or an older dead message sent back with them: redrive refuses them.
-- kinds: reads
SELECT d."id" AS id
FROM "webhooks_dead" AS d
WHERE d."dedupe_key" IS NOT NULL
  AND d."id" IN (SELECT j.value FROM json_each(:ids) AS j)
  AND (EXISTS (
    SELECT 1
    FROM "webhooks_queue" AS p
    WHERE p."dedupe_key" = d."dedupe_key"
  AND p."processed_at" IS NULL
  ) OR EXISTS (
    SELECT 1
    FROM "webhooks_dead" AS o
    WHERE o."dedupe_key" = d."dedupe_key"
      AND o."id" < d."id"
      AND o."id" IN (SELECT j.value FROM json_each(:ids) AS j)
  ))
ORDER BY d."id";

-- name: redrive_blocked_all
-- The dead messages whose dedupe_key a pending message holds, or an older dead message sent back with them: redrive refuses them.
-- kinds: reads
SELECT d."id" AS id
FROM "webhooks_dead" AS d
WHERE d."dedupe_key" IS NOT NULL
  AND (EXISTS (
    SELECT 1
    FROM "webhooks_queue" AS p
    WHERE p."dedupe_key" = d."dedupe_key"
  AND p."processed_at" IS NULL
  ) OR EXISTS (
    SELECT 1
    FROM "webhooks_dead" AS o
    WHERE o."dedupe_key" = d."dedupe_key"
      AND o."id" < d."id"
  ))
ORDER BY d."id";

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes writes
INSERT INTO "webhooks_queue" ("id", "payload", "attempt", "retry_after", "processed_at", "dedupe_key", "outcome", "done_pct")
SELECT "id", "payload", 1, NULL, "processed_at", "dedupe_key", "outcome", "done_pct"
FROM "webhooks_dead";
DELETE FROM "webhooks_dead";

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM "webhooks_dead"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM "webhooks_dead";

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM "webhooks_queue"
WHERE "id" IN (
  SELECT "id"
  FROM "webhooks_queue"
  WHERE "processed_at" < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :age_s || ' seconds')
  ORDER BY "processed_at", "id"
  LIMIT :batch
);

-- name: pause
-- Pauses webhooks_queue: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "webhooks_queue_pause" (queue_table, queue_group, paused_at)
VALUES ('webhooks_queue', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes webhooks_queue: the next claim lists its rows again.
-- kinds: writes
DELETE FROM "webhooks_queue_pause"
WHERE queue_table = 'webhooks_queue'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of webhooks_queue ("group" '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "webhooks_queue_pause"
WHERE queue_table = 'webhooks_queue'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, -((julianday('now') - julianday("retry_after")) * 86400.0) AS due_s
FROM "webhooks_queue"
WHERE "processed_at" IS NULL
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: advance
-- Brings the delayed messages (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE "webhooks_queue"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', "retry_after", '-' || :by_s || ' seconds')
WHERE "processed_at" IS NULL
  AND "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER) AS minute, COUNT(*) AS n
FROM "webhooks_queue"
WHERE "processed_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
GROUP BY CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER)
ORDER BY minute;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (the runtime checks the keys held in its own process first; another process's are not visible); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id AND "processed_at" IS NULL;
