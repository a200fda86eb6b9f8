-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "reports"
-- dialect: "mysql"
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
-- seal: sha256:692d21562275e6a04dfdb28c9670cea9d95a8f8a88b36be7e921d24127df0bda

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, the table that keeps each schedule's last slot, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS `reports_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `locked_until` DATETIME(6) NULL,
  `processed_at` DATETIME(6) NULL,
  `slot` TEXT NULL,
  INDEX `reports_queue_claim` (`processed_at`, `id`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `reports_queue_schedules` (
  `queue` VARCHAR(191) NOT NULL,
  `schedule` VARCHAR(191) NOT NULL,
  `horizon` BIGINT NOT NULL,
  `last_slot` BIGINT NULL,
  `paused` INT NOT NULL DEFAULT 0,
  PRIMARY KEY (`queue`, `schedule`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `reports_queue_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message; value_<column> gives each other column its value.
-- kinds: writes reads
INSERT INTO `reports_queue` (`payload`, `slot`)
VALUES (%(payload)s, %(value_slot)s);
SELECT LAST_INSERT_ID() AS id;

-- name: claim
-- Lists up to scan ready rows (free or expired) without locking them; locks up to limit of those still ready by primary key (locked rows skipped) and reads the token, the server's clock plus lease_s; then writes the token to the rows it locked (ids: their ids as a JSON array). One transaction.
-- kinds: reads reads writes
SELECT `id` AS id
FROM `reports_queue`
WHERE `processed_at` IS NULL
  AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
  AND NOT EXISTS (
    SELECT 1
    FROM `reports_queue_pause` AS qgen_paused
    WHERE qgen_paused.queue_table = 'reports_queue'
      AND qgen_paused.queue_group = ''
  )
ORDER BY `id`
LIMIT %(scan)s;
SELECT `reports_queue`.`id` AS id, `payload` AS payload, UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS token
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
WHERE `processed_at` IS NULL
  AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
SET `reports_queue`.`locked_until` = %(token)s;

-- name: extend
-- Reads the new token (the server's clock plus lease_s), then moves the held lease to it (no row: the lease was lost).
-- kinds: reads writes
SELECT UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS new_token;
UPDATE `reports_queue`
SET `locked_until` = %(new_token)s
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE `reports_queue`
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE `reports_queue`
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: retry
-- Returns the row at once by clearing its lease.
-- kinds: writes
UPDATE `reports_queue`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: marks them processed; the ids it finished (a pair missing lost its lease).
-- kinds: reads writes
SELECT `reports_queue`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id AND `reports_queue`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id AND `reports_queue`.`locked_until` = j.qgen_token
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL;

-- name: drop_many
-- Finishes poison messages exactly as ack_many does: they leave the queue.
-- kinds: reads writes
SELECT `reports_queue`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id AND `reports_queue`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id AND `reports_queue`.`locked_until` = j.qgen_token
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; the ids it returned.
-- kinds: reads writes
SELECT `reports_queue`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id AND `reports_queue`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id AND `reports_queue`.`locked_until` = j.qgen_token
SET `locked_until` = NULL;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE `reports_queue`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared.
-- kinds: writes
UPDATE `reports_queue`
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now), delayed (retry_after in the future), in_flight (a lease in the future), dead (NULL: no dead letter), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, 0 AS `delayed`, qgen_live.qgen_in_flight AS `in_flight`, NULL AS `dead`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM `reports_queue`
    WHERE `processed_at` IS NOT NULL
    LIMIT %(processed_limit)s
  ) AS qgen_kept
) AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `reports_queue_pause`
  WHERE queue_table = 'reports_queue'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `locked_until` >= UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_in_flight
  FROM (
    SELECT `id`, `locked_until`
    FROM `reports_queue`
    WHERE `processed_at` IS NULL
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (done: marked processed; running: a lease in the future; pending otherwise), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, CASE WHEN `processed_at` IS NOT NULL THEN 'done' WHEN `locked_until` >= UTC_TIMESTAMP(6) THEN 'running' ELSE 'pending' END AS `state`, NULL AS attempts, NULL AS `result`, NULL AS `progress`, NULL AS last_error, NULL AS enqueued_at, `processed_at` AS processed_at
FROM `reports_queue`
WHERE `id` = %(id)s;

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM `reports_queue`
WHERE `processed_at` < UTC_TIMESTAMP(6) - INTERVAL %(age_s)s SECOND
ORDER BY `processed_at`, `id`
LIMIT %(batch)s;

-- name: pause
-- Pauses reports_queue: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `reports_queue_pause` (queue_table, queue_group, paused_at)
VALUES ('reports_queue', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes reports_queue: the next claim lists its rows again.
-- kinds: writes
DELETE FROM `reports_queue_pause`
WHERE queue_table = 'reports_queue'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of reports_queue (`group` '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `reports_queue_pause`
WHERE queue_table = 'reports_queue'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload
FROM `reports_queue`
WHERE `processed_at` IS NULL
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6)) AS minute, COUNT(*) AS n
FROM `reports_queue`
WHERE `processed_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND
GROUP BY TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6))
ORDER BY minute;

-- name: schedule_now
-- The database's clock as seconds since the Unix epoch (UTC): what the schedules' slots are compared with.
-- kinds: reads
SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) / 1000000.0 AS now_s;

-- name: schedule_state
-- Each schedule's state: every slot up to horizon is decided (fired or skipped), last_slot is the last one that fired, paused is 1 while paused.
-- kinds: reads
SELECT `schedule` AS schedule, `horizon` AS horizon, `last_slot` AS last_slot, `paused` AS paused
FROM `reports_queue_schedules`
WHERE `queue` = %(queue)s
ORDER BY `schedule`;

-- name: schedule_start
-- Adds a schedule's state the first time it is seen, horizon being the clock's second then (no earlier slot fires); a state already there is kept.
-- kinds: writes
INSERT INTO `reports_queue_schedules` (`queue`, `schedule`, `horizon`, `paused`)
VALUES (%(queue)s, %(schedule)s, %(horizon)s, 0)
ON DUPLICATE KEY UPDATE `horizon` = `horizon`;

-- name: schedule_fire
-- Decides a schedule's slots up to horizon if its horizon is still seen and it is not paused: the one row it changes entitles the caller to enqueue those slots' messages in the same transaction; no row, another scheduler did.
-- kinds: writes
UPDATE `reports_queue_schedules`
SET `horizon` = %(horizon)s, `last_slot` = %(last_slot)s
WHERE `queue` = %(queue)s
  AND `schedule` = %(schedule)s
  AND `horizon` = %(seen)s
  AND `paused` = 0;

-- name: schedule_pause
-- Pauses (paused 1) or resumes (paused 0) a schedule; its horizon moves up to horizon, so the slots it was paused through never fire.
-- kinds: writes
UPDATE `reports_queue_schedules`
SET `paused` = %(paused)s, `horizon` = CASE WHEN `horizon` < %(horizon)s THEN %(horizon)s ELSE `horizon` END
WHERE `queue` = %(queue)s
  AND `schedule` = %(schedule)s;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (a lease in the future); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
UPDATE `reports_queue`
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL
WHERE `id` = %(id)s AND `processed_at` IS NULL AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6));
