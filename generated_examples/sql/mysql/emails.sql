-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "emails"
-- dialect: "mysql"
-- form: "lease"
-- table: "emails_queue"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after", "locked_until": "locked_until", "progress": "progress"}
-- max_attempts: 3
-- dead_letter: {"table": "emails_dead"}
-- lease_s: 60
-- pause_table: "emails_queue_pause"
-- seal: sha256:bb0ac9d2572c8b3a490e8d4d5acaf3a20eef88c3500c3c7dbb5b3ab714293bce

-- name: schema
-- Creates the queue table, its dead-letter table, the table of paused scopes, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS `emails_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  `locked_until` DATETIME(6) NULL,
  `progress` JSON NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `emails_dead` (
  `id` BIGINT NOT NULL PRIMARY KEY,
  `payload` JSON NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  `locked_until` DATETIME(6) NULL,
  `progress` JSON NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `emails_queue_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now.
-- kinds: writes reads
INSERT INTO `emails_queue` (`payload`, `retry_after`)
VALUES (%(payload)s, UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND);
SELECT LAST_INSERT_ID() AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -(TIMESTAMPDIFF(MICROSECOND, MIN(`retry_after`), UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `emails_queue`
WHERE `retry_after` > UTC_TIMESTAMP(6);

-- name: claim
-- Lists up to scan ready rows (free or expired) without locking them; locks up to limit of those still ready by primary key (locked rows skipped) and reads the token, the server's clock plus lease_s; then writes the token to the rows it locked (ids: their ids as a JSON array), counting the attempt. One transaction.
-- kinds: reads reads writes
SELECT `id` AS id
FROM `emails_queue`
WHERE (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
  AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
  AND NOT EXISTS (
    SELECT 1
    FROM `emails_queue_pause` AS qgen_paused
    WHERE qgen_paused.queue_table = 'emails_queue'
      AND qgen_paused.queue_group = ''
  )
ORDER BY `id`
LIMIT %(scan)s;
SELECT `emails_queue`.`id` AS id, `payload` AS payload, `attempt` AS attempt, UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS token
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `emails_queue` FORCE INDEX (PRIMARY) ON `emails_queue`.`id` = j.qgen_id
WHERE (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
  AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `emails_queue` FORCE INDEX (PRIMARY) ON `emails_queue`.`id` = j.qgen_id
SET `emails_queue`.`locked_until` = %(token)s, `emails_queue`.`attempt` = `emails_queue`.`attempt` + 1;

-- name: extend
-- Reads the new token (the server's clock plus lease_s), then moves the held lease to it (no row: the lease was lost).
-- kinds: reads writes
SELECT UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS new_token;
UPDATE `emails_queue`
SET `locked_until` = %(new_token)s
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM `emails_queue`
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: progress
-- Records the running handler's progress (JSON) in progress, in a statement of its own, on the row while it still holds the delivery's token.
-- kinds: writes
UPDATE `emails_queue`
SET `progress` = %(progress)s
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM `emails_queue`
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: retry
-- Returns the row at once by clearing its lease (the claim already counted the attempt).
-- kinds: writes
UPDATE `emails_queue`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: retry_after
-- Returns the row delay_s seconds from now and clears its lease.
-- kinds: writes
UPDATE `emails_queue`
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: deletes them; the ids it finished (a pair missing lost its lease).
-- kinds: reads writes
SELECT `emails_queue`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `emails_queue` FORCE INDEX (PRIMARY) ON `emails_queue`.`id` = j.qgen_id AND `emails_queue`.`locked_until` = j.qgen_token
FOR UPDATE;
DELETE `emails_queue`
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `emails_queue` FORCE INDEX (PRIMARY) ON `emails_queue`.`id` = j.qgen_id AND `emails_queue`.`locked_until` = j.qgen_token;

-- name: drop_many
-- Finishes poison messages exactly as ack_many does: they leave the queue.
-- kinds: reads writes
SELECT `emails_queue`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `emails_queue` FORCE INDEX (PRIMARY) ON `emails_queue`.`id` = j.qgen_id AND `emails_queue`.`locked_until` = j.qgen_token
FOR UPDATE;
DELETE `emails_queue`
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `emails_queue` FORCE INDEX (PRIMARY) ON `emails_queue`.`id` = j.qgen_id AND `emails_queue`.`locked_until` = j.qgen_token;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; the ids it returned.
-- kinds: reads writes
SELECT `emails_queue`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `emails_queue` FORCE INDEX (PRIMARY) ON `emails_queue`.`id` = j.qgen_id AND `emails_queue`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `emails_queue` FORCE INDEX (PRIMARY) ON `emails_queue`.`id` = j.qgen_id AND `emails_queue`.`locked_until` = j.qgen_token
SET `locked_until` = NULL;

-- name: retry_after_many
-- Returns the rows of pairs that still hold their token delay_s seconds from now and clears their lease; the ids it touched.
-- kinds: reads writes
SELECT `emails_queue`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `emails_queue` FORCE INDEX (PRIMARY) ON `emails_queue`.`id` = j.qgen_id AND `emails_queue`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `emails_queue` FORCE INDEX (PRIMARY) ON `emails_queue`.`id` = j.qgen_id AND `emails_queue`.`locked_until` = j.qgen_token
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, `locked_until` = NULL;

-- name: dead_letter
-- At the cap: moves the row into emails_dead, payload and count kept (a copy, then a delete, in one transaction), lease cleared.
-- kinds: writes writes
INSERT INTO `emails_dead` (`id`, `payload`, `attempt`, `retry_after`, `locked_until`, `progress`)
SELECT `id`, `payload`, `attempt`, `retry_after`, NULL, `progress`
FROM `emails_queue`
WHERE `id` = %(id)s AND `locked_until` = %(token)s;
DELETE FROM `emails_queue`
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE `emails_queue`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared and the claim's count undone.
-- kinds: writes
UPDATE `emails_queue`
SET `locked_until` = NULL, `attempt` = `attempt` - 1
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now), delayed (retry_after in the future), in_flight (a lease in the future), dead (in the dead letter, counted up to count_limit rows), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, qgen_live.qgen_delayed AS `delayed`, qgen_live.qgen_in_flight AS `in_flight`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM `emails_dead`
    LIMIT %(count_limit)s
  ) AS qgen_dead
) AS `dead`, NULL AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `emails_queue_pause`
  WHERE queue_table = 'emails_queue'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6)) AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `retry_after` > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_delayed,
    COALESCE(SUM(CASE WHEN `locked_until` >= UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_in_flight
  FROM (
    SELECT `id`, `retry_after`, `locked_until`
    FROM `emails_queue`
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; running: a lease in the future; pending otherwise), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, CASE WHEN `locked_until` >= UTC_TIMESTAMP(6) THEN 'running' ELSE 'pending' END AS `state`, `attempt` - 1 AS attempts, NULL AS `result`, `progress` AS `progress`, NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM `emails_queue`
WHERE `id` = %(id)s
UNION ALL
SELECT `id` AS id, `payload` AS payload, 'dead' AS `state`, `attempt` - 1 AS attempts, NULL AS `result`, `progress` AS `progress`, NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM `emails_dead`
WHERE `id` = %(id)s;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `emails_dead`
WHERE `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `emails_dead`
WHERE `id` < %(after_id)s
ORDER BY `id` DESC
LIMIT %(limit)s;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `emails_dead`
WHERE `id` = %(id)s;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to emails_queue as first deliveries (attempt 1, no delay, no lease): moved, a copy then a delete in one transaction, so a message is never in both tables.
-- kinds: writes writes
INSERT INTO `emails_queue` (`id`, `payload`, `attempt`, `retry_after`, `locked_until`, `progress`)
SELECT `id`, `payload`, 1, NULL, NULL, `progress`
FROM `emails_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);
DELETE FROM `emails_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes writes
INSERT INTO `emails_queue` (`id`, `payload`, `attempt`, `retry_after`, `locked_until`, `progress`)
SELECT `id`, `payload`, 1, NULL, NULL, `progress`
FROM `emails_dead`;
DELETE FROM `emails_dead`;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM `emails_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM `emails_dead`;

-- name: pause
-- Pauses emails_queue: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `emails_queue_pause` (queue_table, queue_group, paused_at)
VALUES ('emails_queue', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes emails_queue: the next claim lists its rows again.
-- kinds: writes
DELETE FROM `emails_queue_pause`
WHERE queue_table = 'emails_queue'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of emails_queue (`group` '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `emails_queue_pause`
WHERE queue_table = 'emails_queue'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, -(TIMESTAMPDIFF(MICROSECOND, `retry_after`, UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `emails_queue`
WHERE `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: advance
-- Brings the delayed messages (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE `emails_queue`
SET `retry_after` = `retry_after` - INTERVAL %(by_s)s SECOND
WHERE `retry_after` > UTC_TIMESTAMP(6);

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a lease in the future); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM `emails_queue`
WHERE `id` = %(id)s AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6));
