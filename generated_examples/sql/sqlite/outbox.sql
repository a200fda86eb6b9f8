-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- outbox: "outbox"
-- dialect: "sqlite"
-- table: "outbox"
-- columns: {"id": "id", "payload": "payload", "topic": "topic", "key": "partition_key", "created_at": "created_at", "processed_at": "processed_at"}
-- note: "the relay's BEGIN IMMEDIATE holds the database's write lock while its handler runs: one relay at a time, and put waits for the relay's batch"
-- seal: sha256:4632613c9b60b800662fc972b4cdb1d5512a3e428a5281099ce37ccb4afe2fb4

-- name: schema
-- Creates the outbox table and the indexes the relay's fetch, prune and the console's counts read, if missing.
-- kinds: writes writes writes writes
CREATE TABLE IF NOT EXISTS "outbox" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "topic" TEXT,
  "partition_key" TEXT,
  "created_at" TEXT NOT NULL,
  "processed_at" TEXT
);
CREATE INDEX IF NOT EXISTS "outbox_claim" ON "outbox" ("id") WHERE "processed_at" IS NULL;
CREATE INDEX IF NOT EXISTS "outbox_processed" ON "outbox" ("processed_at") WHERE "processed_at" IS NOT NULL;
CREATE INDEX IF NOT EXISTS "outbox_enqueued" ON "outbox" ("created_at") WHERE "processed_at" IS NULL;

-- name: put
-- Adds one record in the caller's transaction, stamped with the database's clock.
-- kinds: writes-returning
INSERT INTO "outbox" ("payload", "topic", "partition_key", "created_at")
VALUES (:payload, :topic, :record_key, strftime('%Y-%m-%d %H:%M:%f', 'now'))
RETURNING "id" AS id;

-- name: fetch
-- Selects up to limit unmarked records after after_id, in id order, and holds them until the relay's COMMIT (BEGIN IMMEDIATE: one relay at a time).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "topic" AS "topic", "partition_key" AS "key", "created_at" AS "created_at"
FROM "outbox"
WHERE "processed_at" IS NULL
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: mark
-- Marks a handed record processed (ack and drop): it is never fetched again.
-- kinds: writes
UPDATE "outbox"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE "id" = :id
  AND "processed_at" IS NULL;

-- name: prune
-- Deletes the records marked more than age_s seconds ago, by the database's clock; unmarked ones stay.
-- kinds: writes
DELETE FROM "outbox"
WHERE "processed_at" < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :age_s || ' seconds');

-- name: stats
-- Counts the records by the database's clock, in the keys a queue's stats reads: ready (unmarked, counted up to count_limit rows; pending: the same count), delayed (0), in_flight and dead (NULL: a relay's hold is its transaction's, and an outbox has no dead letter), processed (marked, kept until prune; counted up to processed_limit rows), oldest_ready_s (seconds since the first unmarked record was created).
-- kinds: reads
SELECT qgen_unmarked.qgen_pending AS pending, qgen_unmarked.qgen_pending AS "ready", 0 AS "delayed", NULL AS "in_flight", NULL AS "dead", (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM "outbox"
    WHERE "processed_at" IS NOT NULL
    LIMIT :processed_limit
  ) AS qgen_kept
) AS "processed", (
  SELECT (julianday('now') - julianday("created_at")) * 86400.0
  FROM "outbox"
  WHERE "processed_at" IS NULL
  ORDER BY "id"
  LIMIT 1
) AS "oldest_ready_s"
FROM (
  SELECT COUNT(*) AS qgen_pending
  FROM (
    SELECT 1 AS unmarked
    FROM "outbox"
    WHERE "processed_at" IS NULL
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_unmarked;

-- name: finished_per_minute
-- Counts the records marked in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER) AS minute, COUNT(*) AS n
FROM "outbox"
WHERE "processed_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
GROUP BY CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER)
ORDER BY minute;

-- name: enqueued_per_minute
-- Counts the records created in each minute of the last window_s seconds that the table still holds (unmarked, or marked in that window), for the console's chart.
-- kinds: reads
SELECT CAST((julianday('now') - julianday(e."created_at")) * 1440 AS INTEGER) AS minute, COUNT(*) AS n
FROM (
  SELECT "created_at"
  FROM "outbox"
  WHERE "processed_at" IS NULL
    AND "created_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
  UNION ALL
  SELECT "created_at"
  FROM "outbox"
  WHERE "processed_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
    AND "created_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
) AS e
GROUP BY CAST((julianday('now') - julianday(e."created_at")) * 1440 AS INTEGER)
ORDER BY minute;

-- name: columns
-- Reads how the database describes a table's columns (table_name, in table_schema or the connection's own): for `qgen apply`.
-- kinds: reads
SELECT c.name AS name, c.type AS type, NOT c."notnull" AS nullable, c.dflt_value AS "default", c.pk = 1 AND upper(c.type) = 'INTEGER' AS "generated"
FROM pragma_table_info(:table_name, COALESCE(:table_schema, 'main')) AS c
ORDER BY c.cid;

-- name: indexes
-- Reads a table's indexes and their columns in order, for `qgen apply`.
-- kinds: reads
SELECT l.name AS name, (
  SELECT group_concat(name, ',') FROM (SELECT i.name FROM pragma_index_info(l.name, COALESCE(:table_schema, 'main')) AS i ORDER BY i.seqno)
) AS columns, l.partial AS partial
FROM pragma_index_list(:table_name, COALESCE(:table_schema, 'main')) AS l
ORDER BY l.name;

-- name: custom.expire
-- The service's own event 'expire', run in place of the outcome's own statement.
-- kinds: writes
UPDATE outbox SET topic = 'expired', processed_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id = :id;
