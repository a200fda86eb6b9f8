-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "webhooks"
-- dialect: "mariadb"
-- form: "lease"
-- table: "webhooks_queue"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "locked_until": "locked_until", "processed_at": "processed_at", "concurrency_key": "customer"}
-- max_attempts: null
-- dead_letter: null
-- lease_s: 30
-- pause_table: "webhooks_queue_pause"
-- seal: sha256:f31524503063de3c5b56adfff84323db3ac0f031fd074b1c228a272dfe1cba26

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, if missing; the table `webhooks_queue_limits` of its token bucket and in-flight gate.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS `webhooks_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `locked_until` DATETIME(6) NULL,
  `processed_at` DATETIME(6) NULL,
  `customer` VARCHAR(191) NULL,
  INDEX `webhooks_queue_claim` (`processed_at`, `id`),
  INDEX `webhooks_queue_concurrency` (`customer`, `processed_at`, `id`),
  INDEX `webhooks_queue_in_flight` (`processed_at`, `locked_until`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `webhooks_queue_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `webhooks_queue_limits` (
  `bucket` VARCHAR(191) NOT NULL,
  `slot` INT NOT NULL DEFAULT 0,
  `tokens` DOUBLE,
  `granted` INT NOT NULL DEFAULT 0,
  `refilled_at` DATETIME(6) NULL,
  PRIMARY KEY (`bucket`, `slot`)
);

-- name: enqueue
-- Adds one message.
-- kinds: writes reads
INSERT INTO `webhooks_queue` (`payload`, `customer`)
VALUES (%(payload)s, %(concurrency_key)s);
SELECT LAST_INSERT_ID() AS id;

-- name: claim
-- Lists up to scan ready rows (free or expired) without locking them; locks up to limit of those still ready by primary key (locked rows skipped) and reads the token, the server's clock plus lease_s; then writes the token to the rows it locked (ids: their ids as a JSON array), counting the attempt. One transaction; at most 20 in flight: it first takes the lock of the bucket's row in `webhooks_queue_limits`, then claims at most 20 less the leases in the future (none: no row).
-- kinds: writes reads reads reads writes
INSERT INTO `webhooks_queue_limits` (`bucket`, `slot`)
VALUES ('webhooks', 0)
ON DUPLICATE KEY UPDATE `slot` = `webhooks_queue_limits`.`slot`;
SELECT LEAST(%(limit)s, 20 - COUNT(*)) AS `limit`
FROM `webhooks_queue`
WHERE `processed_at` IS NULL
  AND `locked_until` >= UTC_TIMESTAMP(6)
HAVING COUNT(*) < 20;
SELECT `id` AS id
FROM `webhooks_queue`
WHERE `processed_at` IS NULL
  AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
  AND NOT EXISTS (
    SELECT 1
    FROM `webhooks_queue` AS qgen_before
    WHERE qgen_before.`customer` = `webhooks_queue`.`customer`
      AND qgen_before.`id` < `webhooks_queue`.`id`
      AND qgen_before.`processed_at` IS NULL
    LIMIT 1 OFFSET 1
  )
  AND NOT EXISTS (
    SELECT 1
    FROM `webhooks_queue_pause` AS qgen_paused
    WHERE qgen_paused.queue_table = 'webhooks_queue'
      AND qgen_paused.queue_group = ''
  )
ORDER BY `id`
LIMIT %(scan)s;
SELECT `webhooks_queue`.`id` AS id, `payload` AS payload, `attempt` AS attempt, UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS token
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id
WHERE `processed_at` IS NULL
  AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id
SET `webhooks_queue`.`locked_until` = %(token)s, `webhooks_queue`.`attempt` = `webhooks_queue`.`attempt` + 1;

-- name: rate_take
-- In a transaction of its own, before the claim: takes up to limit tokens from the bucket's row in `webhooks_queue_limits` (50.0 a second by the database's clock, at most 10.0 held); limit: how many it granted, the most the claim may take.
-- kinds: writes reads
INSERT INTO `webhooks_queue_limits` (`bucket`, `slot`, `tokens`, `granted`, `refilled_at`)
VALUES ('webhooks', 0, 10.0 - LEAST(%(limit)s, FLOOR(10.0)), LEAST(%(limit)s, FLOOR(10.0)), UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE `granted` = LEAST(%(limit)s, FLOOR(LEAST(10.0, `webhooks_queue_limits`.`tokens` + 50.0 * TIMESTAMPDIFF(MICROSECOND, `webhooks_queue_limits`.`refilled_at`, UTC_TIMESTAMP(6)) / 1000000.0))), `tokens` = LEAST(10.0, `webhooks_queue_limits`.`tokens` + 50.0 * TIMESTAMPDIFF(MICROSECOND, `webhooks_queue_limits`.`refilled_at`, UTC_TIMESTAMP(6)) / 1000000.0) - LEAST(%(limit)s, FLOOR(LEAST(10.0, `webhooks_queue_limits`.`tokens` + 50.0 * TIMESTAMPDIFF(MICROSECOND, `webhooks_queue_limits`.`refilled_at`, UTC_TIMESTAMP(6)) / 1000000.0))), `refilled_at` = UTC_TIMESTAMP(6);
SELECT `granted` AS `limit`
FROM `webhooks_queue_limits`
WHERE `bucket` = 'webhooks' AND `slot` = 0;

-- name: rate_refund
-- Returns the unused tokens a claim was granted but did not use to the bucket (at most 10.0 held).
-- kinds: writes
UPDATE `webhooks_queue_limits`
SET `tokens` = LEAST(10.0, `webhooks_queue_limits`.`tokens` + %(unused)s)
WHERE `bucket` = 'webhooks'
  AND `slot` = 0;

-- name: extend
-- Reads the new token (the server's clock plus lease_s), then moves the held lease to it (no row: the lease was lost).
-- kinds: reads writes
SELECT UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS new_token;
UPDATE `webhooks_queue`
SET `locked_until` = %(new_token)s
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE `webhooks_queue`
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE `webhooks_queue`
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: retry
-- Returns the row at once by clearing its lease (the claim already counted the attempt).
-- kinds: writes
UPDATE `webhooks_queue`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: marks them processed; the ids it finished (a pair missing lost its lease).
-- kinds: reads writes
SELECT `webhooks_queue`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id AND `webhooks_queue`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id AND `webhooks_queue`.`locked_until` = j.qgen_token
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL;

-- name: drop_many
-- Finishes poison messages exactly as ack_many does: they leave the queue.
-- kinds: reads writes
SELECT `webhooks_queue`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id AND `webhooks_queue`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id AND `webhooks_queue`.`locked_until` = j.qgen_token
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; the ids it returned.
-- kinds: reads writes
SELECT `webhooks_queue`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id AND `webhooks_queue`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `webhooks_queue` FORCE INDEX (PRIMARY) ON `webhooks_queue`.`id` = j.qgen_id AND `webhooks_queue`.`locked_until` = j.qgen_token
SET `locked_until` = NULL;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE `webhooks_queue`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared and the claim's count undone.
-- kinds: writes
UPDATE `webhooks_queue`
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now), delayed (retry_after in the future), in_flight (a lease in the future), dead (NULL: no dead letter), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, 0 AS `delayed`, qgen_live.qgen_in_flight AS `in_flight`, NULL AS `dead`, (
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
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `locked_until` >= UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_in_flight
  FROM (
    SELECT `id`, `locked_until`
    FROM `webhooks_queue`
    WHERE `processed_at` IS NULL
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (done: marked processed; running: a lease in the future; pending otherwise), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, CASE WHEN `processed_at` IS NOT NULL THEN 'done' WHEN `locked_until` >= UTC_TIMESTAMP(6) THEN 'running' ELSE 'pending' END AS `state`, `attempt` - 1 AS attempts, NULL AS `result`, NULL AS `progress`, NULL AS last_error, NULL AS enqueued_at, `processed_at` AS processed_at
FROM `webhooks_queue`
WHERE `id` = %(id)s;

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
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `webhooks_queue`
WHERE `processed_at` IS NULL
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6)) AS minute, COUNT(*) AS n
FROM `webhooks_queue`
WHERE `processed_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND
GROUP BY TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6))
ORDER BY minute;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (a lease in the future); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
UPDATE `webhooks_queue`
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL
WHERE `id` = %(id)s AND `processed_at` IS NULL AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6));
