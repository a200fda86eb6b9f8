-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "reports"
-- dialect: "sqlite"
-- form: "lease"
-- table: "reports_queue"
-- columns: {"id": "id", "payload": "payload", "locked_until": "locked_until", "processed_at": "processed_at"}
-- max_attempts: null
-- dead_letter: null
-- lease_s: 30
-- other_columns: ["slot"]
-- schedule_table: "reports_queue_schedules"
-- schedules: {"nightly": {"cron": "0 3 * * *", "timezone": "Europe/Paris", "payload": {"kind": "nightly"}, "catch_up": "latest", "catch_up_limit": 10}, "tick": {"every_s": 1, "timezone": "UTC", "payload": "tick", "catch_up": "all", "catch_up_limit": 10, "slot_column": "slot"}}
-- pause_table: "reports_queue_pause"
-- seal: sha256:68372edfbcabb66ae3170cd624672220055c7f605d79554283d63e1547c1b0dd

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, with the index prune and stats read over processed rows, the table that keeps each schedule's last slot, if missing.
-- kinds: writes writes writes writes writes
CREATE TABLE IF NOT EXISTS "reports_queue" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "payload" TEXT NOT NULL,
  "locked_until" TEXT,
  "processed_at" TEXT,
  "slot" TEXT
);
CREATE INDEX IF NOT EXISTS "reports_queue_claim" ON "reports_queue" ("id") WHERE "processed_at" IS NULL;
CREATE INDEX IF NOT EXISTS "reports_queue_processed" ON "reports_queue" ("processed_at", "id") WHERE "processed_at" IS NOT NULL;
CREATE TABLE IF NOT EXISTS "reports_queue_schedules" (
  "queue" TEXT NOT NULL,
  "schedule" TEXT NOT NULL,
  "horizon" INTEGER NOT NULL,
  "last_slot" INTEGER,
  "paused" INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY ("queue", "schedule")
);
CREATE TABLE IF NOT EXISTS "reports_queue_pause" (
  queue_table TEXT NOT NULL,
  queue_group TEXT NOT NULL,
  paused_at TEXT,
  PRIMARY KEY (queue_table, queue_group)
);

-- name: enqueue
-- Adds one message; value_<column> gives each other column its value.
-- kinds: writes-returning
INSERT INTO "reports_queue" ("payload", "slot")
VALUES (:payload, :value_slot)
RETURNING "id" AS id;

-- name: claim
-- Leases up to limit ready rows (free or expired) for lease_s seconds; the expiry is the token.
-- kinds: writes-returning
UPDATE "reports_queue"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "id" IN (
  SELECT "id"
  FROM "reports_queue"
  WHERE "processed_at" IS NULL
    AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'))
    AND NOT EXISTS (
      SELECT 1
      FROM "reports_queue_pause" AS qgen_paused
      WHERE qgen_paused.queue_table = 'reports_queue'
        AND qgen_paused.queue_group = ''
    )
  ORDER BY "id"
  LIMIT :limit
)
RETURNING "id" AS id, "payload" AS payload, "locked_until" AS token;

-- name: extend
-- Moves a held lease lease_s seconds past now; the new expiry is the new token (no row: the lease was lost).
-- kinds: writes-returning
UPDATE "reports_queue"
SET "locked_until" = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease_s || ' seconds')
WHERE "id" = :id AND "locked_until" = :token
RETURNING "locked_until" AS new_token;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE "reports_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE "reports_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: retry
-- Returns the row at once by clearing its lease.
-- kinds: writes
UPDATE "reports_queue"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: marks them processed; the ids it finished (a pair missing lost its lease).
-- kinds: writes-returning
UPDATE "reports_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: drop_many
-- Finishes poison messages exactly as ack_many does: they leave the queue.
-- kinds: writes-returning
UPDATE "reports_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; the ids it returned.
-- kinds: writes-returning
UPDATE "reports_queue"
SET "locked_until" = NULL
WHERE ("id", "locked_until") IN (SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(:pairs) AS j)
RETURNING "id" AS id;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE "reports_queue"
SET "locked_until" = NULL
WHERE "id" = :id AND "locked_until" = :token;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared.
-- kinds: writes
UPDATE "reports_queue"
SET "locked_until" = NULL
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
    FROM "reports_queue"
    WHERE "processed_at" IS NOT NULL
    LIMIT :processed_limit
  ) AS qgen_kept
) AS "processed", NULL AS "oldest_ready_s", (
  SELECT COUNT(*)
  FROM "reports_queue_pause"
  WHERE queue_table = 'reports_queue'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now')) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END), 0) AS qgen_in_flight
  FROM (
    SELECT "id", "locked_until"
    FROM "reports_queue"
    WHERE "processed_at" IS NULL
    ORDER BY "id"
    LIMIT :count_limit
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (done: marked processed; running: a lease in the future; pending otherwise), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload, CASE WHEN "processed_at" IS NOT NULL THEN 'done' WHEN "locked_until" >= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 'running' ELSE 'pending' END AS "state", NULL AS attempts, NULL AS "result", NULL AS "progress", NULL AS last_error, NULL AS enqueued_at, "processed_at" AS processed_at
FROM "reports_queue"
WHERE "id" = :id;

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM "reports_queue"
WHERE "id" IN (
  SELECT "id"
  FROM "reports_queue"
  WHERE "processed_at" < strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :age_s || ' seconds')
  ORDER BY "processed_at", "id"
  LIMIT :batch
);

-- name: pause
-- Pauses reports_queue: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT INTO "reports_queue_pause" (queue_table, queue_group, paused_at)
VALUES ('reports_queue', :group, strftime('%Y-%m-%d %H:%M:%f', 'now'))
ON CONFLICT (queue_table, queue_group) DO NOTHING;

-- name: resume
-- Resumes reports_queue: the next claim lists its rows again.
-- kinds: writes
DELETE FROM "reports_queue_pause"
WHERE queue_table = 'reports_queue'
  AND queue_group = :group;

-- name: paused
-- Lists the paused scopes of reports_queue ("group" '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS "group", paused_at
FROM "reports_queue_pause"
WHERE queue_table = 'reports_queue'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT "id" AS id, "payload" AS payload
FROM "reports_queue"
WHERE "processed_at" IS NULL
  AND "id" > :after_id
ORDER BY "id"
LIMIT :limit;

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER) AS minute, COUNT(*) AS n
FROM "reports_queue"
WHERE "processed_at" >= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :window_s || ' seconds')
GROUP BY CAST((julianday('now') - julianday("processed_at")) * 1440 AS INTEGER)
ORDER BY minute;

-- name: schedule_now
-- The database's clock as seconds since the Unix epoch (UTC): what the schedules' slots are compared with.
-- kinds: reads
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now_s;

-- name: schedule_state
-- Each schedule's state: every slot up to horizon is decided (fired or skipped), last_slot is the last one that fired, paused is 1 while paused.
-- kinds: reads
SELECT "schedule" AS schedule, "horizon" AS horizon, "last_slot" AS last_slot, "paused" AS paused
FROM "reports_queue_schedules"
WHERE "queue" = :queue
ORDER BY "schedule";

-- name: schedule_start
-- Adds a schedule's state the first time it is seen, horizon being the clock's second then (no earlier slot fires); a state already there is kept.
-- kinds: writes
INSERT INTO "reports_queue_schedules" ("queue", "schedule", "horizon", "paused")
VALUES (:queue, :schedule, :horizon, 0)
ON CONFLICT ("queue", "schedule") DO NOTHING;

-- name: schedule_fire
-- Decides a schedule's slots up to horizon if its horizon is still seen and it is not paused: the one row it changes entitles the caller to enqueue those slots' messages in the same transaction; no row, another scheduler did.
-- kinds: writes
UPDATE "reports_queue_schedules"
SET "horizon" = :horizon, "last_slot" = :last_slot
WHERE "queue" = :queue
  AND "schedule" = :schedule
  AND "horizon" = :seen
  AND "paused" = 0;

-- name: schedule_pause
-- Pauses (paused 1) or resumes (paused 0) a schedule; its horizon moves up to horizon, so the slots it was paused through never fire.
-- kinds: writes
UPDATE "reports_queue_schedules"
SET "paused" = :paused, "horizon" = CASE WHEN "horizon" < :horizon THEN :horizon ELSE "horizon" END
WHERE "queue" = :queue
  AND "schedule" = :schedule;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (a lease in the future); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
UPDATE "reports_queue"
SET "processed_at" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "locked_until" = NULL
WHERE "id" = :id AND "processed_at" IS NULL AND ("locked_until" IS NULL OR "locked_until" < strftime('%Y-%m-%d %H:%M:%f', 'now'));
