-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "locked"
-- dialect: "sqlite"
-- form: "row_lock"
-- table: "locked"
-- columns: {"id": "id", "payload": "payload", "processed_at": "done_at"}
-- max_attempts: null
-- dead_letter: null
-- pause_table: "locked_pause"
-- note: "BEGIN IMMEDIATE holds the database's write lock while the handler runs: correct but serial"
-- seal: sha256:618badbb430cf5f027ec15e8c65dfb4d0bf4552523a95c124f6cbb0be6cb7488

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, with the index prune and stats read over processed rows, if missing.
-- kinds: writes writes writes writes
CREATE TABLE IF NOT EXISTS "locked" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "done_at" TEXT
);
CREATE INDEX IF NOT EXISTS "locked_claim" ON "locked" ("id") WHERE "done_at" IS NULL;
CREATE INDEX IF NOT EXISTS "locked_processed" ON "locked" ("done_at", "id") WHERE "done_at" IS NOT NULL;
CREATE TABLE IF NOT EXISTS "locked_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message.
-- kinds: writes-returning
INSERT INTO "locked" ("payload")
VALUES (:payload)
RETURNING "id" AS id;

-- name: claim
-- Selects up to limit ready rows and locks them until the transaction ends; locked rows are skipped.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload
FROM "locked"
WHERE "done_at" IS NULL
  AND NOT EXISTS (
    SELECT 1
    FROM "locked_pause" AS qgen_paused
    WHERE qgen_paused.queue_table = 'locked'
      AND qgen_paused.queue_group = ''
  )
ORDER BY "id"
LIMIT :limit;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE "locked"
SET "done_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE "locked"
SET "done_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: ack_many
-- In the claim's transaction: finishes the rows ids (a JSON array): marks them processed.
-- kinds: writes
UPDATE "locked"
SET "done_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: drop_many
-- In the claim's transaction: finishes poison messages exactly as ack_many does.
-- kinds: writes
UPDATE "locked"
SET "done_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (NULL: no dead letter), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", 0 AS "delayed", NULL AS "in_flight", NULL AS "dead", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM "locked"
    WHERE "done_at" IS NOT NULL
    LIMIT :processed_limit
  ) AS qgen_kept
) AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "locked_pause"
  WHERE queue_table = 'locked'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COUNT(*) AS qgen_ready
  FROM (
    SELECT "id"
    FROM "locked"
    WHERE "done_at" IS NULL
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (done: marked processed; pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "done_at" IS NOT NULL THEN 'done' ELSE 'pending' END AS "state", NULL AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, "done_at" AS processed_at
FROM "locked"
WHERE "id" = :id;

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM "locked"
WHERE "id" IN (
  SELECT "id"
  FROM "locked"
  WHERE "done_at" < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :age_s || ' seconds')
  ORDER BY "done_at", "id"
  LIMIT :batch
);

-- name: pause
-- Pauses locked: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "locked_pause" (queue_table, queue_group, paused_at)
VALUES ('locked', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes locked: the next claim lists its rows again.
-- kinds: writes
DELETE FROM "locked_pause"
WHERE queue_table = 'locked'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of locked ("group" '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "locked_pause"
WHERE queue_table = 'locked'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload
FROM "locked"
WHERE "done_at" IS NULL
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT CAST((julianday('now') - julianday("done_at")) * 1440 AS INTEGER) AS minute, COUNT(*) AS n
FROM "locked"
WHERE "done_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
GROUP BY CAST((julianday('now') - julianday("done_at")) * 1440 AS INTEGER)
ORDER BY minute;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (a claim's BEGIN IMMEDIATE holds the database: the cancel waits for its batch to end); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
UPDATE "locked"
SET "done_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id AND "done_at" IS NULL;
