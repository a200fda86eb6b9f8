-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "orders"
-- dialect: "sqlite"
-- form: "row_lock"
-- table: "orders"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after", "fifo_key": "customer"}
-- max_attempts: null
-- dead_letter: null
-- pause_table: "orders_pause"
-- note: "BEGIN IMMEDIATE holds the database's write lock while the handler runs: correct but serial"
-- seal: sha256:881039612e36b7f52dff253deb5a92ed0f7940f65a6ed3d64d9102c494556586

-- name: schema
-- Creates the queue table, the table of paused scopes, and the index that finds a key's earlier rows, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS "orders" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "retry_after" TEXT,
  "customer" TEXT
);
CREATE INDEX IF NOT EXISTS "orders_fifo" ON "orders" ("customer", "id");
CREATE TABLE IF NOT EXISTS "orders_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now; a non-NULL fifo_key delivers it after every earlier message of its key is finished.
-- kinds: writes-returning
INSERT INTO "orders" ("payload", "retry_after", "customer")
VALUES (:payload, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), :fifo_key)
RETURNING "id" AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -((julianday('now') - julianday(MIN("retry_after"))) * 86400.0) AS due_s
FROM "orders"
WHERE "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: claim
-- Selects up to limit ready rows and locks them until the transaction ends; locked rows are skipped.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "orders"
WHERE ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
  AND NOT EXISTS (
    SELECT 1
    FROM "orders" AS qgen_earlier
    WHERE qgen_earlier."customer" = "orders"."customer"
      AND qgen_earlier."id" < "orders"."id"
  )
  AND NOT EXISTS (
    SELECT 1
    FROM "orders_pause" AS qgen_paused
    WHERE qgen_paused.queue_table = 'orders'
      AND qgen_paused.queue_group = ''
  )
ORDER BY "id"
LIMIT :limit;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM "orders"
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM "orders"
WHERE "id" = :id;

-- name: retry
-- Returns the row at once, counting the attempt (without an attempt column the runtime rolls back instead).
-- kinds: writes
UPDATE "orders"
SET "attempt" = "attempt" + 1
WHERE "id" = :id;

-- name: retry_after
-- Returns the row delay_s seconds from now, counting the attempt.
-- kinds: writes
UPDATE "orders"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "attempt" = "attempt" + 1
WHERE "id" = :id;

-- name: ack_many
-- In the claim's transaction: finishes the rows ids (a JSON array): deletes them.
-- kinds: writes
DELETE FROM "orders"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: drop_many
-- In the claim's transaction: finishes poison messages exactly as ack_many does.
-- kinds: writes
DELETE FROM "orders"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: retry_many
-- In the claim's transaction: returns the rows ids at once, counting their attempt.
-- kinds: writes
UPDATE "orders"
SET "attempt" = "attempt" + 1
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: retry_after_many
-- In the claim's transaction: returns the rows ids delay_s seconds from now, counting their attempt.
-- kinds: writes
UPDATE "orders"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay_s || ' seconds'), "attempt" = "attempt" + 1
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (NULL: no dead letter), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", qgen_live.qgen_delayed AS "delayed", NULL AS "in_flight", NULL AS "dead", NULL AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "orders_pause"
  WHERE queue_table = 'orders'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("retry_after" IS NULL OR "retry_after" <= strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT "id", "retry_after"
    FROM "orders"
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, 'pending' AS "state", "attempt" - 1 AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "orders"
WHERE "id" = :id;

-- name: pause
-- Pauses orders: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "orders_pause" (queue_table, queue_group, paused_at)
VALUES ('orders', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes orders: the next claim lists its rows again.
-- kinds: writes
DELETE FROM "orders_pause"
WHERE queue_table = 'orders'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of orders ("group" '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "orders_pause"
WHERE queue_table = 'orders'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt, -((julianday('now') - julianday("retry_after")) * 86400.0) AS due_s
FROM "orders"
WHERE "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: advance
-- Brings the delayed messages (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE "orders"
SET "retry_after" = strftime('%Y-%m-%d %H:%M:%f', "retry_after", '-' || :by_s || ' seconds')
WHERE "retry_after" > strftime('%Y-%m-%d %H:%M:%f', 'now');

-- name: fifo_waiting
-- Lists up to limit fifo keys with unfinished rows waiting behind the key's head (its earliest unfinished row), most waiting first, for the console's queue page.
-- kinds: reads
SELECT "customer" AS fifo_key, MIN("id") AS head_id, COUNT(*) - 1 AS waiting
FROM "orders"
WHERE "customer" IS NOT NULL
GROUP BY "customer"
HAVING COUNT(*) > 1
ORDER BY waiting DESC, head_id
LIMIT :limit;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a claim's BEGIN IMMEDIATE holds the database: the cancel waits for its batch to end); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM "orders"
WHERE "id" = :id;
