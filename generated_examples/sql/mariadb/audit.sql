-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "audit"
-- dialect: "mariadb"
-- form: "row_lock"
-- table: "audit_queue"
-- columns: {"id": "id", "payload": "entry"}
-- max_attempts: null
-- dead_letter: null
-- pause_table: "audit_queue_pause"
-- seal: sha256:94346a78346d3346be4619ed57c9184f49a42fc532a9f76d279c8cfc45853626

-- name: schema
-- Creates the queue table, the table of paused scopes, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS `audit_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `entry` JSON NOT NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `audit_queue_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message.
-- kinds: writes reads
INSERT INTO `audit_queue` (`entry`)
VALUES (%(payload)s);
SELECT LAST_INSERT_ID() AS id;

-- name: claim
-- Lists up to scan ready rows without locking them, then locks up to limit of those still ready by primary key until the transaction ends (ids: the listed ids as a JSON array); locked rows are skipped.
-- kinds: reads reads
SELECT `id` AS id
FROM `audit_queue`
WHERE NOT EXISTS (
    SELECT 1
    FROM `audit_queue_pause` AS qgen_paused
    WHERE qgen_paused.queue_table = 'audit_queue'
      AND qgen_paused.queue_group = ''
  )
ORDER BY `id`
LIMIT %(scan)s;
SELECT `audit_queue`.`id` AS id, `entry` AS payload
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM `audit_queue`
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM `audit_queue`
WHERE `id` = %(id)s;

-- name: ack_many
-- In the claim's transaction: finishes the rows ids (a JSON array): deletes them.
-- kinds: writes
DELETE `audit_queue`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id;

-- name: drop_many
-- In the claim's transaction: finishes poison messages exactly as ack_many does.
-- kinds: writes
DELETE `audit_queue`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id;

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
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, 0 AS `delayed`, NULL AS `in_flight`, NULL AS `dead`, NULL AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `audit_queue_pause`
  WHERE queue_table = 'audit_queue'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COUNT(*) AS qgen_ready
  FROM (
    SELECT `id`
    FROM `audit_queue`
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT `id` AS id, `entry` AS payload, 'pending' AS `state`, NULL AS attempts, NULL AS `result`, NULL AS `progress`, NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM `audit_queue`
WHERE `id` = %(id)s;

-- name: pause
-- Pauses audit_queue: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `audit_queue_pause` (queue_table, queue_group, paused_at)
VALUES ('audit_queue', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes audit_queue: the next claim lists its rows again.
-- kinds: writes
DELETE FROM `audit_queue_pause`
WHERE queue_table = 'audit_queue'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of audit_queue (`group` '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `audit_queue_pause`
WHERE queue_table = 'audit_queue'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `entry` AS payload
FROM `audit_queue`
WHERE `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a claim's transaction holds the row: SKIP LOCKED passes it by); no row changed: in flight, already finished, dead, or no such id.
-- kinds: reads writes
SELECT `id` AS id
FROM `audit_queue`
WHERE `id` = %(id)s
FOR UPDATE SKIP LOCKED;
DELETE FROM `audit_queue`
WHERE `id` = %(id)s;
