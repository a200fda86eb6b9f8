-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "webhooks"
-- dialect: "sqlite"
-- form: "lease"
-- table: "webhooks_queue"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "locked_until": "locked_until", "processed_at": "processed_at", "concurrency_key": "customer"}
-- max_attempts: null
-- dead_letter: null
-- lease_s: 30
-- pause_table: "webhooks_queue_pause"
-- seal: sha256:25dc54fecfc69620c56513ddcf9e817de00c990b140e9ba7616f317b712c23ef

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, with the index prune and stats read over processed rows, if missing; the table "webhooks_queue_limits" of its token bucket and in-flight gate.
-- kinds: writes writes writes writes writes writes writes
CREATE TABLE IF NOT EXISTS "webhooks_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "attempt" INTEGER NOT NULL DEFAULT 1,
  "locked_until" TEXT,
  "processed_at" TEXT,
  "customer" TEXT
);
CREATE INDEX IF NOT EXISTS "webhooks_queue_claim" ON "webhooks_queue" ("id") WHERE "processed_at" IS NULL;
CREATE INDEX IF NOT EXISTS "webhooks_queue_processed" ON "webhooks_queue" ("processed_at", "id") WHERE "processed_at" IS NOT NULL;
CREATE INDEX IF NOT EXISTS "webhooks_queue_concurrency" ON "webhooks_queue" ("customer", "id") WHERE "processed_at" IS NULL;
CREATE INDEX IF NOT EXISTS "webhooks_queue_in_flight" ON "webhooks_queue" ("locked_until") WHERE "processed_at" IS NULL;
CREATE TABLE IF NOT EXISTS "webhooks_queue_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);
CREATE TABLE IF NOT EXISTS "webhooks_queue_limits" (
  "bucket" TEXT NOT NULL,
  "slot" INTEGER NOT NULL DEFAULT 0,
  "tokens" REAL,
  "granted" INTEGER NOT NULL DEFAULT 0,
  "refilled_at" TEXT,
  PRIMARY KEY ("bucket", "slot")
);

-- name: enqueue
-- Adds one message.
-- kinds: writes-returning
INSERT INTO "webhooks_queue" ("payload", "customer")
VALUES (:payload, :concurrency_key)
RETURNING "id" AS id;

-- name: claim
-- Leases up to limit ready rows (free or expired) for lease_s seconds, counting the attempt; the expiry is the token; at most 20 in flight: it first takes the lock of the bucket's row in "webhooks_queue_limits", then claims at most 20 less the leases in the future (none: no row).
-- kinds: writes reads writes-returning
INSERT INTO "webhooks_queue_limits" ("bucket", "slot")
VALUES ('webhooks', 0)
ON CONFLICT ("bucket", "slot") DO UPDATE SET "slot" = "webhooks_queue_limits"."slot";
SELECT MIN(:limit, 20 - COUNT(*)) AS "limit"
FROM "webhooks_queue"
WHERE "processed_at" IS NULL
  AND "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now')
HAVING COUNT(*) < 20;
UPDATE "webhooks_queue"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds'), "attempt" = "attempt" + 1
WHERE "id" IN (
  SELECT "id"
  FROM "webhooks_queue"
  WHERE "processed_at" IS NULL
    AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND NOT EXISTS (
      SELECT 1
      FROM "webhooks_queue" AS qgen_before
      WHERE qgen_before."customer" = "webhooks_queue"."customer"
        AND qgen_before."id" < "webhooks_queue"."id"
        AND qgen_before."processed_at" IS NULL
      LIMIT 1 OFFSET 1
    )
    AND NOT EXISTS (
      SELECT 1
      FROM "webhooks_queue_pause" AS qgen_paused
      WHERE qgen_paused.queue_table = 'webhooks_queue'
        AND qgen_paused.queue_group = ''
    )
  ORDER BY "id"
  LIMIT :limit
)
RETURNING "id" AS id, "payload" AS payload, "attempt" - 1 AS attempt, "locked_until" AS token;

-- name: rate_take
-- In a transaction of its own, before the claim: takes up to limit tokens from the bucket's row in "webhooks_queue_limits" (50.0 a second by the database's clock, at most 10.0 held); limit: how many it granted, the most the claim may take.
-- kinds: writes-returning
INSERT INTO "webhooks_queue_limits" ("bucket", "slot", "tokens", "granted", "refilled_at")
VALUES ('webhooks', 0, 10.0 - MIN(:limit, CAST(10.0 AS INTEGER)), MIN(:limit, CAST(10.0 AS INTEGER)), strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT ("bucket", "slot") DO UPDATE SET "granted" = MIN(:limit, CAST(MIN(10.0, "webhooks_queue_limits"."tokens" + 50.0 * (julianday('now') - julianday("webhooks_queue_limits"."refilled_at")) * 86400.0) AS INTEGER)), "tokens" = MIN(10.0, "webhooks_queue_limits"."tokens" + 50.0 * (julianday('now') - julianday("webhooks_queue_limits"."refilled_at")) * 86400.0) - MIN(:limit, CAST(MIN(10.0, "webhooks_queue_limits"."tokens" + 50.0 * (julianday('now') - julianday("webhooks_queue_limits"."refilled_at")) * 86400.0) AS INTEGER)), "refilled_at" = strftime('%Y-%m-%d %H:%M:%f', 'now')
RETURNING "granted" AS "limit";

-- name: rate_refund
-- Returns the unused tokens a claim was granted but did not use to the bucket (at most 10.0 held).
-- kinds: writes
UPDATE "webhooks_queue_limits"
SET "tokens" = MIN(10.0, "webhooks_queue_limits"."tokens" + :unused)
WHERE "bucket" = 'webhooks'
  AND "slot" = 0;

-- name: extend
-- Moves a held lease lease_s seconds past now; the new expiry is the new token (no row: the lease was lost).
-- kinds: writes-returning
UPDATE "webhooks_queue"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "id" = :id AND "locked_until" = :token
RETURNING "locked_until" AS new_token;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: retry
-- Returns the row at once by clearing its lease (the claim already counted the attempt).
-- kinds: writes
UPDATE "webhooks_queue"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: marks them processed; the ids it finished (a pair missing lost its lease).
-- kinds: writes-returning
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: drop_many
-- Finishes poison messages exactly as ack_many does: they leave the queue.
-- kinds: writes-returning
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; the ids it returned.
-- kinds: writes-returning
UPDATE "webhooks_queue"
SET "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE "webhooks_queue"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared and the claim's count undone.
-- kinds: writes
UPDATE "webhooks_queue"
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now), delayed (retry_after in the future), in_flight (a lease in the future), dead (NULL: no dead letter), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS "ready", 0 AS "delayed", qgen_live.qgen_in_flight AS "in_flight", NULL AS "dead", (
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
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_in_flight
  FROM (
    SELECT "id", "locked_until"
    FROM "webhooks_queue"
    WHERE "processed_at" IS NULL
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (done: marked processed; running: a lease in the future; pending otherwise), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "processed_at" IS NOT NULL THEN 'done' WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 'running' ELSE 'pending' END AS "state", "attempt" - 1 AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, "processed_at" AS processed_at
FROM "webhooks_queue"
WHERE "id" = :id;

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
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, "attempt" AS attempt
FROM "webhooks_queue"
WHERE "processed_at" IS NULL
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER) AS minute, COUNT(*) AS n
FROM "webhooks_queue"
WHERE "processed_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
GROUP BY CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER)
ORDER BY minute;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (a lease in the future); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
UPDATE "webhooks_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE "id" = :id AND "processed_at" IS NULL AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'));
