-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "invoices"
-- dialect: "mysql"
-- form: "row_lock"
-- table: "invoices_queue"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after", "processed_at": "processed_at", "dedupe_key": "invoice_key", "result": "result", "progress": "progress"}
-- max_attempts: 4
-- dead_letter: {"table": "invoices_dead"}
-- pause_table: "invoices_queue_pause"
-- seal: sha256:3023132bc4a304e4fd1f63644379b9dc692e142bb2b8ecab458663e9298cc41f

-- name: schema
-- Creates the queue table, its dead-letter table, the table of paused scopes and the index the claim reads, the unique index that keeps one pending message per dedupe_key, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS `invoices_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  `processed_at` DATETIME(6) NULL,
  `invoice_key` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  `result` JSON NULL,
  `progress` JSON NULL,
  `qgen_pending_key` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin GENERATED ALWAYS AS (CASE WHEN `processed_at` IS NULL THEN `invoice_key` END) STORED,
  INDEX `invoices_queue_claim` (`processed_at`, `id`),
  UNIQUE INDEX `invoices_queue_dedupe` (`qgen_pending_key`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `invoices_dead` (
  `id` BIGINT NOT NULL PRIMARY KEY,
  `payload` JSON NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  `processed_at` DATETIME(6) NULL,
  `invoice_key` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  `result` JSON NULL,
  `progress` JSON NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `invoices_queue_pause` (
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
WHERE CASE WHEN %(dedupe_key)s IS NULL THEN 1 ELSE GET_LOCK(CONCAT('qgen-key:', LEFT(SHA2(CONCAT(DATABASE(), '.invoices_queue:', %(dedupe_key)s), 256), 40)), 10) END = 1;
INSERT IGNORE INTO `invoices_queue` (`payload`, `retry_after`, `invoice_key`)
VALUES (%(payload)s, UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, %(dedupe_key)s);
SELECT CASE WHEN ROW_COUNT() = 1 THEN LAST_INSERT_ID() END AS id, CASE WHEN %(dedupe_key)s IS NULL THEN NULL ELSE RELEASE_LOCK(CONCAT('qgen-key:', LEFT(SHA2(CONCAT(DATABASE(), '.invoices_queue:', %(dedupe_key)s), 256), 40))) END AS unlocked;

-- name: enqueue_existing
-- Reads the id of the pending message (not processed, not dead) that holds dedupe_key: the one a duplicate enqueue returns.
-- kinds: reads
SELECT `id` AS id
FROM `invoices_queue`
WHERE `qgen_pending_key` = %(dedupe_key)s;

-- name: enqueue_unlock
-- Releases the key's named lock after an enqueue failed between taking and releasing it (the lock is the session's: a rollback keeps it).
-- kinds: reads
SELECT CASE WHEN %(dedupe_key)s IS NULL THEN NULL ELSE RELEASE_LOCK(CONCAT('qgen-key:', LEFT(SHA2(CONCAT(DATABASE(), '.invoices_queue:', %(dedupe_key)s), 256), 40))) END AS unlocked;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -(TIMESTAMPDIFF(MICROSECOND, MIN(`retry_after`), UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `invoices_queue`
WHERE `processed_at` IS NULL
  AND `retry_after` > UTC_TIMESTAMP(6);

-- name: claim
-- Lists up to scan ready rows without locking them, locks up to limit of those still ready by primary key (locked rows skipped), then counts their delivery and marks them not ready for hold_s seconds (ids: the locked ids as a JSON array); one transaction, committed before they are handled (a delivery that kills its worker still counts); take then locks them.
-- kinds: reads reads writes
SELECT `id` AS id
FROM `invoices_queue`
WHERE `processed_at` IS NULL
  AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
  AND NOT EXISTS (
    SELECT 1
    FROM `invoices_queue_pause` AS qgen_paused
    WHERE qgen_paused.queue_table = 'invoices_queue'
      AND qgen_paused.queue_group = ''
  )
ORDER BY `id`
LIMIT %(scan)s;
SELECT `invoices_queue`.`id` AS id
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `invoices_queue` FORCE INDEX (PRIMARY) ON `invoices_queue`.`id` = j.qgen_id
WHERE `processed_at` IS NULL
  AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `invoices_queue` FORCE INDEX (PRIMARY) ON `invoices_queue`.`id` = j.qgen_id
SET `invoices_queue`.`attempt` = `invoices_queue`.`attempt` + 1, `invoices_queue`.`retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(hold_s)s SECOND;

-- name: take
-- In the batch's transaction: locks the rows ids (a JSON array) the claim counted, by primary key, until the transaction ends; it waits for a claim that holds one for an instant (its mark keeps every claim from taking it), so no counted row is left unhandled.
-- kinds: reads
SELECT `invoices_queue`.`id` AS id, `payload` AS payload, `attempt` - 1 AS attempt
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `invoices_queue` FORCE INDEX (PRIMARY) ON `invoices_queue`.`id` = j.qgen_id
WHERE `invoices_queue`.`processed_at` IS NULL
ORDER BY `invoices_queue`.`id`
FOR UPDATE;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE `invoices_queue`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;

-- name: ack_result
-- Finishes the row as ack does (marks it processed) and keeps the handler's result (JSON) in result until the row is pruned.
-- kinds: writes
UPDATE `invoices_queue`
SET `processed_at` = UTC_TIMESTAMP(6), `result` = %(result)s
WHERE `id` = %(id)s;

-- name: progress
-- Records the running handler's progress (JSON) in progress, in a statement of its own, on the row the claim's transaction holds (seen by others when that transaction commits).
-- kinds: writes
UPDATE `invoices_queue`
SET `progress` = %(progress)s
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE `invoices_queue`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;

-- name: retry
-- Returns the row at once by clearing the claim's mark (the claim already counted the attempt).
-- kinds: writes
UPDATE `invoices_queue`
SET `retry_after` = NULL
WHERE `id` = %(id)s;

-- name: retry_after
-- Returns the row delay_s seconds from now (the claim already counted the attempt).
-- kinds: writes
UPDATE `invoices_queue`
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND
WHERE `id` = %(id)s;

-- name: ack_many
-- In the claim's transaction: finishes the rows ids (a JSON array): marks them processed.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `invoices_queue` FORCE INDEX (PRIMARY) ON `invoices_queue`.`id` = j.qgen_id
SET `processed_at` = UTC_TIMESTAMP(6);

-- name: drop_many
-- In the claim's transaction: finishes poison messages exactly as ack_many does.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `invoices_queue` FORCE INDEX (PRIMARY) ON `invoices_queue`.`id` = j.qgen_id
SET `processed_at` = UTC_TIMESTAMP(6);

-- name: retry_many
-- In the claim's transaction: returns the rows ids at once by clearing the claim's mark (the claim already counted their attempt).
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `invoices_queue` FORCE INDEX (PRIMARY) ON `invoices_queue`.`id` = j.qgen_id
SET `retry_after` = NULL;

-- name: retry_after_many
-- In the claim's transaction: returns the rows ids delay_s seconds from now.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `invoices_queue` FORCE INDEX (PRIMARY) ON `invoices_queue`.`id` = j.qgen_id
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND;

-- name: dead_letter
-- At the cap: moves the row into invoices_dead, payload and count kept (a copy, then a delete, in one transaction).
-- kinds: writes writes
INSERT INTO `invoices_dead` (`id`, `payload`, `attempt`, `retry_after`, `processed_at`, `invoice_key`, `result`, `progress`)
SELECT `id`, `payload`, `attempt`, `retry_after`, `processed_at`, `invoice_key`, `result`, `progress`
FROM `invoices_queue`
WHERE `id` = %(id)s;
DELETE FROM `invoices_queue`
WHERE `id` = %(id)s;

-- name: unclaim
-- In the batch's transaction: gives back a row whose handler never started (the consumer stops): the claim's count undone and its mark cleared.
-- kinds: writes
UPDATE `invoices_queue`
SET `attempt` = `attempt` - 1, `retry_after` = NULL
WHERE `id` = %(id)s;

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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, qgen_live.qgen_delayed AS `delayed`, NULL AS `in_flight`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM `invoices_dead`
    LIMIT %(count_limit)s
  ) AS qgen_dead
) AS `dead`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM `invoices_queue`
    WHERE `processed_at` IS NOT NULL
    LIMIT %(processed_limit)s
  ) AS qgen_kept
) AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `invoices_queue_pause`
  WHERE queue_table = 'invoices_queue'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `retry_after` > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT `id`, `retry_after`
    FROM `invoices_queue`
    WHERE `processed_at` IS NULL
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; done: marked processed; pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, CASE WHEN `processed_at` IS NOT NULL THEN 'done' ELSE 'pending' END AS `state`, `attempt` - 1 AS attempts, `result` AS `result`, `progress` AS `progress`, NULL AS last_error, NULL AS enqueued_at, `processed_at` AS processed_at
FROM `invoices_queue`
WHERE `id` = %(id)s
UNION ALL
SELECT `id` AS id, `payload` AS payload, 'dead' AS `state`, `attempt` - 1 AS attempts, `result` AS `result`, `progress` AS `progress`, NULL AS last_error, NULL AS enqueued_at, `processed_at` AS processed_at
FROM `invoices_dead`
WHERE `id` = %(id)s;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `invoices_dead`
WHERE `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `invoices_dead`
WHERE `id` < %(after_id)s
ORDER BY `id` DESC
LIMIT %(limit)s;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `invoices_dead`
WHERE `id` = %(id)s;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to invoices_queue as first deliveries (attempt 1, no delay): moved, a copy then a delete in one transaction, so a message is never in both tables.
-- kinds: writes writes
INSERT INTO `invoices_queue` (`id`, `payload`, `attempt`, `retry_after`, `processed_at`, `invoice_key`, `result`, `progress`)
SELECT `id`, `payload`, 1, NULL, `processed_at`, `invoice_key`, `result`, `progress`
FROM `invoices_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);
DELETE FROM `invoices_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);

-- name: redrive_blocked
-- The dead messages ids whose dedupe_key a pending message holds, or an older dead message sent back with them: redrive refuses them.
-- kinds: reads
SELECT d.`id` AS id
FROM `invoices_dead` AS d
WHERE d.`invoice_key` IS NOT NULL
  AND d.`id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j)
  AND (EXISTS (
    SELECT 1
    FROM `invoices_queue` AS p
    WHERE p.`qgen_pending_key` = d.`invoice_key`
  ) OR EXISTS (
    SELECT 1
    FROM `invoices_dead` AS o
    WHERE o.`invoice_key` = d.`invoice_key`
      AND o.`id` < d.`id`
      AND o.`id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j)
  ))
ORDER BY d.`id`;

-- name: redrive_blocked_all
-- The dead messages whose dedupe_key a pending message holds, or an older dead message sent back with them: redrive refuses them.
-- kinds: reads
SELECT d.`id` AS id
FROM `invoices_dead` AS d
WHERE d.`invoice_key` IS NOT NULL
  AND (EXISTS (
    SELECT 1
    FROM `invoices_queue` AS p
    WHERE p.`qgen_pending_key` = d.`invoice_key`
  ) OR EXISTS (
    SELECT 1
    FROM `invoices_dead` AS o
    WHERE o.`invoice_key` = d.`invoice_key`
      AND o.`id` < d.`id`
  ))
ORDER BY d.`id`;

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes writes
INSERT INTO `invoices_queue` (`id`, `payload`, `attempt`, `retry_after`, `processed_at`, `invoice_key`, `result`, `progress`)
SELECT `id`, `payload`, 1, NULL, `processed_at`, `invoice_key`, `result`, `progress`
FROM `invoices_dead`;
DELETE FROM `invoices_dead`;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM `invoices_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM `invoices_dead`;

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM `invoices_queue`
WHERE `processed_at` < UTC_TIMESTAMP(6) - INTERVAL %(age_s)s SECOND
ORDER BY `processed_at`, `id`
LIMIT %(batch)s;

-- name: pause
-- Pauses invoices_queue: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `invoices_queue_pause` (queue_table, queue_group, paused_at)
VALUES ('invoices_queue', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes invoices_queue: the next claim lists its rows again.
-- kinds: writes
DELETE FROM `invoices_queue_pause`
WHERE queue_table = 'invoices_queue'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of invoices_queue (`group` '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `invoices_queue_pause`
WHERE queue_table = 'invoices_queue'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, -(TIMESTAMPDIFF(MICROSECOND, `retry_after`, UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `invoices_queue`
WHERE `processed_at` IS NULL
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: advance
-- Brings the delayed messages (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE `invoices_queue`
SET `retry_after` = `retry_after` - INTERVAL %(by_s)s SECOND
WHERE `processed_at` IS NULL
  AND `retry_after` > UTC_TIMESTAMP(6);

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6)) AS minute, COUNT(*) AS n
FROM `invoices_queue`
WHERE `processed_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND
GROUP BY TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6))
ORDER BY minute;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (a claim's transaction holds the row: SKIP LOCKED passes it by); no row changed: in flight, already finished, dead, or no such id.
-- kinds: reads writes
SELECT `id` AS id
FROM `invoices_queue`
WHERE `id` = %(id)s AND `processed_at` IS NULL
FOR UPDATE SKIP LOCKED;
UPDATE `invoices_queue`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;
