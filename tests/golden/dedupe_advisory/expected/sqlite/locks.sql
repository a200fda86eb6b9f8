-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "locks"
-- dialect: "sqlite"
-- form: "advisory"
-- table: "locks"
-- columns: {"id": "id", "payload": "payload", "processed_at": "processed_at", "dedupe_key": "dedupe_key"}
-- max_attempts: null
-- dead_letter: null
-- pause_table: "locks_pause"
-- note: "advisory keys are held in the consumer's process: run one consumer process per database file"
-- seal: sha256:ee3afcda2b829bac4abf33f6bf5215ac47a2abc6936f1307b9e8ad2bf63bef62

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, with the index prune and stats read over processed rows, the unique index that keeps one pending message per dedupe_key, if missing.
-- kinds: writes writes writes writes writes
CREATE TABLE IF NOT EXISTS "locks" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "processed_at" TEXT,
  "dedupe_key" TEXT
);
CREATE INDEX IF NOT EXISTS "locks_claim" ON "locks" ("id") WHERE "processed_at" IS NULL;
CREATE INDEX IF NOT EXISTS "locks_processed" ON "locks" ("processed_at", "id") WHERE "processed_at" IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS "locks_dedupe" ON "locks" ("dedupe_key") WHERE "processed_at" IS NULL;
CREATE TABLE IF NOT EXISTS "locks_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message; a dedupe_key a pending message already holds adds nothing and returns no new id (enqueue_existing reads the pending one).
-- kinds: writes-returning
INSERT INTO "locks" ("payload", "dedupe_key")
VALUES (:payload, :dedupe_key)
ON CONFLICT ("dedupe_key") WHERE "processed_at" IS NULL DO NOTHING
RETURNING "id" AS id;

-- name: enqueue_existing
-- Reads the id of the pending message (not processed, not dead) that holds dedupe_key: the one a duplicate enqueue returns.
-- kinds: reads
SELECT "id" AS id
FROM "locks"
WHERE "dedupe_key" = :dedupe_key
  AND "processed_at" IS NULL;

-- name: claim
-- Lists up to scan ready rows; the runtime keeps the first limit whose keys (held in its process) are free.
-- kinds: reads
SELECT "id" AS id
FROM "locks"
WHERE "processed_at" IS NULL
  AND NOT EXISTS (
    SELECT 1
    FROM "locks_pause" AS qgen_paused
    WHERE qgen_paused.queue_table = 'locks'
      AND qgen_paused.queue_group = ''
  )
ORDER BY "id"
LIMIT :scan;

-- name: take
-- Under their keys: re-reads which of the rows ids (a JSON array) are still claimable; a row not returned was settled since the claim (unlock it).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload
FROM "locks"
WHERE "processed_at" IS NULL
  AND "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE "locks"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE "locks"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id;

-- name: ack_many
-- Under their keys: finishes the rows ids (a JSON array): marks them processed; then unlock.
-- kinds: writes
UPDATE "locks"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: drop_many
-- Under their keys: finishes poison messages exactly as ack_many does; then unlock.
-- kinds: writes
UPDATE "locks"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: advisory holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (NULL: no dead letter), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", 0 AS "delayed", NULL AS "in_flight", NULL AS "dead", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM "locks"
    WHERE "processed_at" IS NOT NULL
    LIMIT :processed_limit
  ) AS qgen_kept
) AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "locks_pause"
  WHERE queue_table = 'locks'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COUNT(*) AS qgen_ready
  FROM (
    SELECT "id"
    FROM "locks"
    WHERE "processed_at" IS NULL
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (done: marked processed; pending otherwise, also while a consumer holds it: advisory holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "processed_at" IS NOT NULL THEN 'done' ELSE 'pending' END AS "state", NULL AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, "processed_at" AS processed_at
FROM "locks"
WHERE "id" = :id;

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM "locks"
WHERE "id" IN (
  SELECT "id"
  FROM "locks"
  WHERE "processed_at" < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :age_s || ' seconds')
  ORDER BY "processed_at", "id"
  LIMIT :batch
);

-- name: pause
-- Pauses locks: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "locks_pause" (queue_table, queue_group, paused_at)
VALUES ('locks', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes locks: the next claim lists its rows again.
-- kinds: writes
DELETE FROM "locks_pause"
WHERE queue_table = 'locks'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of locks ("group" '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "locks_pause"
WHERE queue_table = 'locks'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload
FROM "locks"
WHERE "processed_at" IS NULL
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER) AS minute, COUNT(*) AS n
FROM "locks"
WHERE "processed_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
GROUP BY CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER)
ORDER BY minute;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (the runtime checks the keys held in its own process first; another process's are not visible); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
UPDATE "locks"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id AND "processed_at" IS NULL;
