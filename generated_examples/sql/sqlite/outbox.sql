-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- outbox: "outbox"
-- dialect: "sqlite"
-- table: "outbox"
-- columns: {"id": "id", "payload": "payload", "topic": "topic", "key": "partition_key", "created_at": "created_at", "processed_at": "processed_at"}
-- note: "the relay's BEGIN IMMEDIATE holds the database's write lock while its handler runs: one relay at a time, and put waits for the relay's batch"
-- seal: sha256:91ad67408fe1ef6f461a8edeef6dbe7573256e8538b98783da97fb5eff7787c7

-- name: schema
-- Creates the outbox table and the index the relay's fetch reads, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS "outbox" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "topic" TEXT,
  "partition_key" TEXT,
  "created_at" TEXT NOT NULL,
  "processed_at" TEXT
);
CREATE INDEX IF NOT EXISTS "outbox_claim" ON "outbox" ("id") WHERE "processed_at" IS NULL;

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
