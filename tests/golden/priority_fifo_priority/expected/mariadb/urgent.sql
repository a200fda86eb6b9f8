-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "urgent"
-- dialect: "mariadb"
-- form: "row_lock"
-- table: "urgent"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after", "priority": "priority"}
-- max_attempts: null
-- dead_letter: null
-- pause_table: "urgent_pause"
-- seal: sha256:f0d99b7f66fb6e90546855db655e5a590fd6705dd60d2b2caf941ff973d0f5ce

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS `urgent` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  `priority` INT NOT NULL DEFAULT 0,
  INDEX `urgent_claim` (`priority` DESC, `id`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `urgent_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now; priority orders the claim (higher first; NULL: 0).
-- kinds: writes reads
INSERT INTO `urgent` (`payload`, `retry_after`, `priority`)
VALUES (%(payload)s, UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, COALESCE(%(priority)s, 0));
SELECT LAST_INSERT_ID() AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -(TIMESTAMPDIFF(MICROSECOND, MIN(`retry_after`), UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `urgent`
WHERE `retry_after` > UTC_TIMESTAMP(6);

-- name: claim
-- Lists up to scan ready rows without locking them, then locks up to limit of those still ready by primary key until the transaction ends (ids: the listed ids as a JSON array); locked rows are skipped.
-- kinds: reads reads
SELECT `id` AS id
FROM `urgent`
WHERE (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
  AND NOT EXISTS (
    SELECT 1
    FROM `urgent_pause` AS qgen_paused
    WHERE qgen_paused.queue_table = 'urgent'
      AND qgen_paused.queue_group = ''
  )
ORDER BY `priority` DESC, `id`
LIMIT %(scan)s;
SELECT `urgent`.`id` AS id, `payload` AS payload, `attempt` AS attempt
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `urgent` FORCE INDEX (PRIMARY) ON `urgent`.`id` = j.qgen_id
WHERE (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM `urgent`
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM `urgent`
WHERE `id` = %(id)s;

-- name: retry
-- Returns the row at once, counting the attempt (without an attempt column the runtime rolls back instead).
-- kinds: writes
UPDATE `urgent`
SET `attempt` = `attempt` + 1
WHERE `id` = %(id)s;

-- name: retry_after
-- Returns the row delay_s seconds from now, counting the attempt.
-- kinds: writes
UPDATE `urgent`
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, `attempt` = `attempt` + 1
WHERE `id` = %(id)s;

-- name: ack_many
-- In the claim's transaction: finishes the rows ids (a JSON array): deletes them.
-- kinds: writes
DELETE `urgent`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `urgent` FORCE INDEX (PRIMARY) ON `urgent`.`id` = j.qgen_id;

-- name: drop_many
-- In the claim's transaction: finishes poison messages exactly as ack_many does.
-- kinds: writes
DELETE `urgent`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `urgent` FORCE INDEX (PRIMARY) ON `urgent`.`id` = j.qgen_id;

-- name: retry_many
-- In the claim's transaction: returns the rows ids at once, counting their attempt.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `urgent` FORCE INDEX (PRIMARY) ON `urgent`.`id` = j.qgen_id
SET `attempt` = `attempt` + 1;

-- name: retry_after_many
-- In the claim's transaction: returns the rows ids delay_s seconds from now, counting their attempt.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `urgent` FORCE INDEX (PRIMARY) ON `urgent`.`id` = j.qgen_id
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, `attempt` = `attempt` + 1;

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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (NULL: no dead letter), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, qgen_live.qgen_delayed AS `delayed`, NULL AS `in_flight`, NULL AS `dead`, NULL AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `urgent_pause`
  WHERE queue_table = 'urgent'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `retry_after` > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT `id`, `retry_after`
    FROM `urgent`
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, 'pending' AS `state`, `attempt` - 1 AS attempts, NULL AS `result`, NULL AS `progress`, NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM `urgent`
WHERE `id` = %(id)s;

-- name: pause
-- Pauses urgent: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `urgent_pause` (queue_table, queue_group, paused_at)
VALUES ('urgent', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes urgent: the next claim lists its rows again.
-- kinds: writes
DELETE FROM `urgent_pause`
WHERE queue_table = 'urgent'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of urgent (`group` '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `urgent_pause`
WHERE queue_table = 'urgent'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, -(TIMESTAMPDIFF(MICROSECOND, `retry_after`, UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `urgent`
WHERE `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: advance
-- Brings the delayed messages (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE `urgent`
SET `retry_after` = `retry_after` - INTERVAL %(by_s)s SECOND
WHERE `retry_after` > UTC_TIMESTAMP(6);

-- name: ready_by_priority
-- Counts the ready rows (claimable now) of each priority, highest first, for the console's queue page.
-- kinds: reads
SELECT `priority` AS `priority`, COUNT(*) AS ready
FROM `urgent`
WHERE (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
GROUP BY `priority`
ORDER BY `priority` DESC;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a claim's transaction holds the row: SKIP LOCKED passes it by); no row changed: in flight, already finished, dead, or no such id.
-- kinds: reads writes
SELECT `id` AS id
FROM `urgent`
WHERE `id` = %(id)s
FOR UPDATE SKIP LOCKED;
DELETE FROM `urgent`
WHERE `id` = %(id)s;
