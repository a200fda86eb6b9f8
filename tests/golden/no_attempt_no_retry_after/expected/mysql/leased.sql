-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "leased"
-- dialect: "mysql"
-- form: "lease"
-- table: "leased"
-- columns: {"id": "id", "payload": "payload", "locked_until": "locked_until"}
-- max_attempts: null
-- dead_letter: null
-- lease_s: 30
-- pause_table: "leased_pause"
-- seal: sha256:ad20f5246430dc160814aa8e06f0e0f890073d99a32bad24cd2f92275fff76be

-- name: schema
-- Creates the queue table, the table of paused scopes, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS `leased` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `locked_until` DATETIME(6) NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `leased_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message.
-- kinds: writes reads
INSERT INTO `leased` (`payload`)
VALUES (%(payload)s);
SELECT LAST_INSERT_ID() AS id;

-- name: claim
-- Lists up to scan ready rows (free or expired) without locking them; locks up to limit of those still ready by primary key (locked rows skipped) and reads the token, the server's clock plus lease_s; then writes the token to the rows it locked (ids: their ids as a JSON array). One transaction.
-- kinds: reads reads writes
SELECT `id` AS id
FROM `leased`
WHERE (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
  AND NOT EXISTS (
    SELECT 1
    FROM `leased_pause` AS qgen_paused
    WHERE qgen_paused.queue_table = 'leased'
      AND qgen_paused.queue_group = ''
  )
ORDER BY `id`
LIMIT %(scan)s;
SELECT `leased`.`id` AS id, `payload` AS payload, UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS token
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `leased` FORCE INDEX (PRIMARY) ON `leased`.`id` = j.qgen_id
WHERE (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `leased` FORCE INDEX (PRIMARY) ON `leased`.`id` = j.qgen_id
SET `leased`.`locked_until` = %(token)s;

-- name: extend
-- Reads the new token (the server's clock plus lease_s), then moves the held lease to it (no row: the lease was lost).
-- kinds: reads writes
SELECT UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS new_token;
UPDATE `leased`
SET `locked_until` = %(new_token)s
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM `leased`
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM `leased`
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: retry
-- Returns the row at once by clearing its lease.
-- kinds: writes
UPDATE `leased`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: deletes them; the ids it finished (a pair missing lost its lease).
-- kinds: reads writes
SELECT `leased`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `leased` FORCE INDEX (PRIMARY) ON `leased`.`id` = j.qgen_id AND `leased`.`locked_until` = j.qgen_token
FOR UPDATE;
DELETE `leased`
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `leased` FORCE INDEX (PRIMARY) ON `leased`.`id` = j.qgen_id AND `leased`.`locked_until` = j.qgen_token;

-- name: drop_many
-- Finishes poison messages exactly as ack_many does: they leave the queue.
-- kinds: reads writes
SELECT `leased`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `leased` FORCE INDEX (PRIMARY) ON `leased`.`id` = j.qgen_id AND `leased`.`locked_until` = j.qgen_token
FOR UPDATE;
DELETE `leased`
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `leased` FORCE INDEX (PRIMARY) ON `leased`.`id` = j.qgen_id AND `leased`.`locked_until` = j.qgen_token;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; the ids it returned.
-- kinds: reads writes
SELECT `leased`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `leased` FORCE INDEX (PRIMARY) ON `leased`.`id` = j.qgen_id AND `leased`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `leased` FORCE INDEX (PRIMARY) ON `leased`.`id` = j.qgen_id AND `leased`.`locked_until` = j.qgen_token
SET `locked_until` = NULL;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE `leased`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared.
-- kinds: writes
UPDATE `leased`
SET `locked_until` = NULL
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now), delayed (retry_after in the future), in_flight (a lease in the future), dead (NULL: no dead letter), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, 0 AS `delayed`, qgen_live.qgen_in_flight AS `in_flight`, NULL AS `dead`, NULL AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `leased_pause`
  WHERE queue_table = 'leased'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `locked_until` >= UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_in_flight
  FROM (
    SELECT `id`, `locked_until`
    FROM `leased`
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (running: a lease in the future; pending otherwise), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, CASE WHEN `locked_until` >= UTC_TIMESTAMP(6) THEN 'running' ELSE 'pending' END AS `state`, NULL AS attempts, NULL AS `result`, NULL AS `progress`, NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM `leased`
WHERE `id` = %(id)s;

-- name: pause
-- Pauses leased: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `leased_pause` (queue_table, queue_group, paused_at)
VALUES ('leased', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes leased: the next claim lists its rows again.
-- kinds: writes
DELETE FROM `leased_pause`
WHERE queue_table = 'leased'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of leased (`group` '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `leased_pause`
WHERE queue_table = 'leased'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload
FROM `leased`
WHERE `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a lease in the future); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
DELETE FROM `leased`
WHERE `id` = %(id)s AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6));
