-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "webhooks"
-- dialect: "mysql"
-- form: "advisory"
-- table: "webhooks_queue"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after", "processed_at": "processed_at", "dedupe_key": "dedupe_key", "result": "outcome", "progress": "done_pct"}
-- max_attempts: 3
-- dead_letter: {"table": "webhooks_dead"}
-- pause_table: "webhooks_queue_pause"
-- seal: sha256:34ed81f2bbec48464bb739759afb399e09efa83169ae85e9e858ef98fa712a20

-- name: schema
-- Creates the queue table, its dead-letter table, the table of paused scopes and the index the claim reads, the unique index that keeps one pending message per dedupe_key, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS `webhooks_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  `processed_at` DATETIME(6) NULL,
  `dedupe_key` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  `outcome` JSON NULL,
  `done_pct` JSON NULL,
  `qgen_pending_key` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin GENERATED ALWAYS AS (CASE WHEN `processed_at` IS NULL THEN `dedupe_key` END) STORED,
  INDEX `webhooks_queue_claim` (`processed_at`, `id`),
  UNIQUE INDEX `webhooks_queue_dedupe` (`qgen_pending_key`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `webhooks_dead` (
  `id` BIGINT NOT NULL PRIMARY KEY,
  `payload` JSON NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  `processed_at` DATETIME(6) NULL,
  `dedupe_key` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  `outcome` JSON NULL,
  `done_pct` JSON NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `webhooks_queue_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now; a dedupe_key a pending message already holds adds nothing and returns no new id (enqueue_existing reads the pending one).
-- kinds: reads writes reads
SELECT 1 AS locked
FROM DUAL
WHERE CASE WHEN %(dedupe_key)s IS NULL THEN 1 ELSE GET_LOCK(CONCAT('qgen-key:', LEFT(SHA2(CONCAT(DATABASE(), '.webhooks_queue:', %(dedupe_key)s), 256), 40)), 10) END = 1;
INSERT IGNORE INTO `webhooks_queue` (`payload`, `retry_after`, `dedupe_key`)
VALUES (%(payload)s, UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, %(dedupe_key)s);
SELECT CASE WHEN ROW_COUNT() = 1 THEN LAST_INSERT_ID() END AS id, CASE WHEN %(dedupe_key)s IS NULL THEN NULL ELSE RELEASE_LOCK(CONCAT('qgen-key:', LEFT(SHA2(CONCAT(DATABASE(), '.webhooks_queue:', %(dedupe_key)s), 256), 40))) END AS unlocked;

-- name: enqueue_existing
-- Reads the id of the pending message (not processed, not dead) that holds dedupe_key: the one a duplicate enqueue returns.
-- kinds: reads
SELECT `id` AS id
FROM `webhooks_queue`
WHERE `qgen_pending_key` = %(dedupe_key)s;

-- name: enqueue_unlock
-- Releases the key's named lock after an enqueue failed between taking and releasing it (the lock is the session's: a rollback keeps it).
-- kinds: reads
SELECT CASE WHEN %(dedupe_key)s IS NULL THEN NULL ELSE RELEASE_LOCK(CONCAT('qgen-key:', LEFT(SHA2(CONCAT(DATABASE(), '.webhooks_queue:', %(dedupe_key)s), 256), 40))) END AS unlocked;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -(TIMESTAMPDIFF(MICROSECOND, MIN(`retry_after`), UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `webhooks_queue`
WHERE `processed_at` IS NULL
  AND `retry_after` > UTC_TIMESTAMP(6);

-- name: claim
-- Tries the keys of up to scan ready rows without waiting and keeps the first limit it gets, unlocking the rest at once; held = 1 where this connection now holds the row's key until unlock.
-- kinds: reads
WITH candidates AS (
  SELECT r.id, CASE WHEN GET_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.webhooks_queue'), 256), 24), ':', r.id), 0) = 1 THEN 1 ELSE 0 END AS locked
  FROM (
    SELECT `id` AS id
    FROM `webhooks_queue`
    WHERE `processed_at` IS NULL
      AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
      AND NOT EXISTS (
        SELECT 1
        FROM `webhooks_queue_pause` AS qgen_paused
        WHERE qgen_paused.queue_table = 'webhooks_queue'
          AND qgen_paused.queue_group = ''
      )
    ORDER BY `id`
    LIMIT %(scan)s
  ) AS r
  ORDER BY r.id
  LIMIT %(scan)s
), counted AS (
  SELECT id, locked, SUM(locked) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) AS nth
  FROM candidates
)
SELECT id, CASE WHEN locked = 0 THEN 0 WHEN nth <= %(limit)s THEN 1 WHEN RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.webhooks_queue'), 256), 24), ':', id)) = 1 THEN 0 ELSE 0 END AS held
FROM counted;

-- name: take
-- Under their keys: reads which of the rows ids (a JSON array) are still claimable (a row not returned was settled since the claim: unlock it), then counts their attempt.
-- kinds: reads writes
SELECT `webhooks_queue`.`id` AS id, `payload` AS payload, `attempt` AS attempt
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id
WHERE `processed_at` IS NULL
  AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6));
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id
SET `webhooks_queue`.`attempt` = `webhooks_queue`.`attempt` + 1;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE `webhooks_queue`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;

-- name: ack_result
-- Finishes the row as ack does (marks it processed) and keeps the handler's result (JSON) in outcome until the row is pruned.
-- kinds: writes
UPDATE `webhooks_queue`
SET `processed_at` = UTC_TIMESTAMP(6), `outcome` = %(result)s
WHERE `id` = %(id)s;

-- name: progress
-- Records the running handler's progress (JSON) in done_pct, in a statement of its own, on the row whose key this connection holds.
-- kinds: writes
UPDATE `webhooks_queue`
SET `done_pct` = %(progress)s
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE `webhooks_queue`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;

-- name: retry_after
-- Returns the row delay_s seconds from now (the take already counted the attempt); then unlock.
-- kinds: writes
UPDATE `webhooks_queue`
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND
WHERE `id` = %(id)s;

-- name: ack_many
-- Under their keys: finishes the rows ids (a JSON array): marks them processed; then unlock.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id
SET `processed_at` = UTC_TIMESTAMP(6);

-- name: drop_many
-- Under their keys: finishes poison messages exactly as ack_many does; then unlock.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id
SET `processed_at` = UTC_TIMESTAMP(6);

-- name: retry_after_many
-- Under their keys: returns the rows ids delay_s seconds from now (the take already counted the attempt); then unlock.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND;

-- name: dead_letter
-- At the cap: moves the row into webhooks_dead, payload and count kept (a copy, then a delete, in one transaction).
-- kinds: writes writes
INSERT INTO `webhooks_dead` (`id`, `payload`, `attempt`, `retry_after`, `processed_at`, `dedupe_key`, `outcome`, `done_pct`)
SELECT `id`, `payload`, `attempt`, `retry_after`, `processed_at`, `dedupe_key`, `outcome`, `done_pct`
FROM `webhooks_queue`
WHERE `id` = %(id)s;
DELETE FROM `webhooks_queue`
WHERE `id` = %(id)s;

-- name: unclaim
-- Under its key: undoes the take's count of a row whose handler never started (the consumer stopped); then unlock.
-- kinds: writes
UPDATE `webhooks_queue`
SET `attempt` = `attempt` - 1
WHERE `id` = %(id)s;

-- name: unlock
-- Releases the named locks of the rows ids (a JSON array) held by this session.
-- kinds: reads
SELECT RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.webhooks_queue'), 256), 24), ':', j.qgen_id)) AS unlocked
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j;

-- name: columns
-- Reads how the database describes a table's columns (table_name, in table_schema or the connection's own): for `qgen verify` and the consumer's start-up check.
-- kinds: reads
SELECT COLUMN_NAME AS name, COLUMN_TYPE AS type, IS_NULLABLE = 'YES' AS nullable, COLUMN_DEFAULT AS `default`, EXTRA LIKE '%%auto_increment%%' AS `generated`
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(%(table_schema)s, DATABASE()) AND TABLE_NAME = %(table_name)s
ORDER BY ORDINAL_POSITION;

-- name: indexes
-- Reads a table's indexes and their columns in order, for `qgen verify`.
-- kinds: reads
SELECT INDEX_NAME AS name, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX SEPARATOR ',') AS columns, 0 AS partial
FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = COALESCE(%(table_schema)s, DATABASE()) AND TABLE_NAME = %(table_name)s
GROUP BY INDEX_NAME
ORDER BY INDEX_NAME;

-- name: stats
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: advisory holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, qgen_live.qgen_delayed AS `delayed`, NULL AS `in_flight`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM `webhooks_dead`
    LIMIT %(count_limit)s
  ) AS qgen_dead
) AS `dead`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM `webhooks_queue`
    WHERE `processed_at` IS NOT NULL
    LIMIT %(processed_limit)s
  ) AS qgen_kept
) AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `webhooks_queue_pause`
  WHERE queue_table = 'webhooks_queue'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `retry_after` > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT `id`, `retry_after`
    FROM `webhooks_queue`
    WHERE `processed_at` IS NULL
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; done: marked processed; pending otherwise, also while a consumer holds it: advisory holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, CASE WHEN `processed_at` IS NOT NULL THEN 'done' ELSE 'pending' END AS `state`, `attempt` - 1 AS attempts, `outcome` AS `result`, `done_pct` AS `progress`, NULL AS last_error, NULL AS enqueued_at, `processed_at` AS processed_at
FROM `webhooks_queue`
WHERE `id` = %(id)s
UNION ALL
SELECT `id` AS id, `payload` AS payload, 'dead' AS `state`, `attempt` - 1 AS attempts, `outcome` AS `result`, `done_pct` AS `progress`, NULL AS last_error, NULL AS enqueued_at, `processed_at` AS processed_at
FROM `webhooks_dead`
WHERE `id` = %(id)s;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `webhooks_dead`
WHERE `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `webhooks_dead`
WHERE `id` < %(after_id)s
ORDER BY `id` DESC
LIMIT %(limit)s;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `webhooks_dead`
WHERE `id` = %(id)s;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to webhooks_queue as first deliveries (attempt 1, no delay): moved, a copy then a delete in one transaction, so a message is never in both tables.
-- kinds: writes writes
INSERT INTO `webhooks_queue` (`id`, `payload`, `attempt`, `retry_after`, `processed_at`, `dedupe_key`, `outcome`, `done_pct`)
SELECT `id`, `payload`, 1, NULL, `processed_at`, `dedupe_key`, `outcome`, `done_pct`
FROM `webhooks_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);
DELETE FROM `webhooks_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);

-- name: redrive_blocked
-- The dead messages ids whose dedupe_key a pending message holds, or an older dead message sent back with them: redrive refuses them.
-- kinds: reads
SELECT d.`id` AS id
FROM `webhooks_dead` AS d
WHERE d.`dedupe_key` IS NOT NULL
  AND d.`id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j)
  AND (EXISTS (
    SELECT 1
    FROM `webhooks_queue` AS p
    WHERE p.`qgen_pending_key` = d.`dedupe_key`
  ) OR EXISTS (
    SELECT 1
    FROM `webhooks_dead` AS o
    WHERE o.`dedupe_key` = d.`dedupe_key`
      AND o.`id` < d.`id`
      AND o.`id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j)
  ))
ORDER BY d.`id`;

-- name: redrive_blocked_all
-- The dead messages whose dedupe_key a pending message holds, or an older dead message sent back with them: redrive refuses them.
-- kinds: reads
SELECT d.`id` AS id
FROM `webhooks_dead` AS d
WHERE d.`dedupe_key` IS NOT NULL
  AND (EXISTS (
    SELECT 1
    FROM `webhooks_queue` AS p
    WHERE p.`qgen_pending_key` = d.`dedupe_key`
  ) OR EXISTS (
    SELECT 1
    FROM `webhooks_dead` AS o
    WHERE o.`dedupe_key` = d.`dedupe_key`
      AND o.`id` < d.`id`
  ))
ORDER BY d.`id`;

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes writes
INSERT INTO `webhooks_queue` (`id`, `payload`, `attempt`, `retry_after`, `processed_at`, `dedupe_key`, `outcome`, `done_pct`)
SELECT `id`, `payload`, 1, NULL, `processed_at`, `dedupe_key`, `outcome`, `done_pct`
FROM `webhooks_dead`;
DELETE FROM `webhooks_dead`;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM `webhooks_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM `webhooks_dead`;

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM `webhooks_queue`
WHERE `processed_at` < UTC_TIMESTAMP(6) - INTERVAL %(age_s)s SECOND
ORDER BY `processed_at`, `id`
LIMIT %(batch)s;

-- name: pause
-- Pauses webhooks_queue: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `webhooks_queue_pause` (queue_table, queue_group, paused_at)
VALUES ('webhooks_queue', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes webhooks_queue: the next claim lists its rows again.
-- kinds: writes
DELETE FROM `webhooks_queue_pause`
WHERE queue_table = 'webhooks_queue'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of webhooks_queue (`group` '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `webhooks_queue_pause`
WHERE queue_table = 'webhooks_queue'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, -(TIMESTAMPDIFF(MICROSECOND, `retry_after`, UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `webhooks_queue`
WHERE `processed_at` IS NULL
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: advance
-- Brings the delayed messages (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE `webhooks_queue`
SET `retry_after` = `retry_after` - INTERVAL %(by_s)s SECOND
WHERE `processed_at` IS NULL
  AND `retry_after` > UTC_TIMESTAMP(6);

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6)) AS minute, COUNT(*) AS n
FROM `webhooks_queue`
WHERE `processed_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND
GROUP BY TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6))
ORDER BY minute;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (another session holds its key; the key is tried, never waited for, then released); no row changed: in flight, already finished, dead, or no such id.
-- kinds: reads writes reads
SELECT %(id)s AS id
FROM DUAL
WHERE GET_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.webhooks_queue'), 256), 24), ':', %(id)s), 0) = 1;
UPDATE `webhooks_queue`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s AND `processed_at` IS NULL;
SELECT RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.webhooks_queue'), 256), 24), ':', %(id)s)) AS unlocked;
