-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "hooks"
-- dialect: "sqlite"
-- form: "advisory"
-- table: "hooks"
-- columns: {"id": "id", "payload": "payload"}
-- max_attempts: null
-- dead_letter: null
-- pause_table: "hooks_pause"
-- note: "advisory keys are held in the consumer's process: run one consumer process per database file"
-- seal: sha256:7d0261fd8d44c054781d4a9e55a40d5990b735adcc3ddeca4a1c2242901b3e81

-- name: schema
-- Creates the queue table, the table of paused scopes, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS "hooks" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS "hooks_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message.
-- kinds: writes-returning
INSERT INTO "hooks" ("payload")
VALUES (:payload)
RETURNING "id" AS id;

-- name: claim
-- Lists up to scan ready rows; the runtime keeps the first limit whose keys (held in its process) are free.
-- kinds: reads
SELECT "id" AS id
FROM "hooks"
WHERE NOT EXISTS (
    SELECT 1
    FROM "hooks_pause" AS qgen_paused
    WHERE qgen_paused.queue_table = 'hooks'
      AND qgen_paused.queue_group = ''
  )
ORDER BY "id"
LIMIT :scan;

-- name: take
-- Under their keys: re-reads which of the rows ids (a JSON array) are still claimable; a row not returned was settled since the claim (unlock it).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload
FROM "hooks"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM "hooks"
WHERE "id" = :id;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM "hooks"
WHERE "id" = :id;

-- name: ack_many
-- Under their keys: finishes the rows ids (a JSON array): deletes them; then unlock.
-- kinds: writes
DELETE FROM "hooks"
WHERE "id" IN (SELECT j.value FROM json_each(:ids) AS j);

-- name: drop_many
-- Under their keys: finishes poison messages exactly as ack_many does; then unlock.
-- kinds: writes
DELETE FROM "hooks"
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: advisory holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (NULL: no dead letter), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", 0 AS "delayed", NULL AS "in_flight", NULL AS "dead", NULL AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "hooks_pause"
  WHERE queue_table = 'hooks'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COUNT(*) AS qgen_ready
  FROM (
    SELECT "id"
    FROM "hooks"
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (pending otherwise, also while a consumer holds it: advisory holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, 'pending' AS "state", NULL AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM "hooks"
WHERE "id" = :id;

-- name: pause
-- Pauses hooks: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "hooks_pause" (queue_table, queue_group, paused_at)
VALUES ('hooks', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes hooks: the next claim lists its rows again.
-- kinds: writes
DELETE FROM "hooks_pause"
WHERE queue_table = 'hooks'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of hooks ("group" '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "hooks_pause"
WHERE queue_table = 'hooks'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload
FROM "hooks"
WHERE "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (the runtime checks the keys held in its own process first; another process's are not visible); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM "hooks"
WHERE "id" = :id;
