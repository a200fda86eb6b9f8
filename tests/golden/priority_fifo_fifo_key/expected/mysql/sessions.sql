-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "sessions"
-- dialect: "mysql"
-- form: "advisory"
-- table: "sessions"
-- columns: {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after", "fifo_key": "session"}
-- max_attempts: 3
-- dead_letter: {"table": "sessions_dead"}
-- pause_table: "sessions_pause"
-- seal: sha256:40ee0a218e551d3b480dc4bda872f6d095a24c42730c793f6e6bfc025d669e8b

-- name: schema
-- Creates the queue table, its dead-letter table, the table of paused scopes, and the index that finds a key's earlier rows, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS `sessions` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  `session` VARCHAR(191) NULL,
  INDEX `sessions_fifo` (`session`, `id`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `sessions_dead` (
  `id` BIGINT NOT NULL PRIMARY KEY,
  `payload` JSON NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  `session` VARCHAR(191) NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `sessions_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now; a non-NULL fifo_key delivers it after every earlier message of its key is finished.
-- kinds: writes reads
INSERT INTO `sessions` (`payload`, `retry_after`, `session`)
VALUES (%(payload)s, UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, %(fifo_key)s);
SELECT LAST_INSERT_ID() AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -(TIMESTAMPDIFF(MICROSECOND, MIN(`retry_after`), UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `sessions`
WHERE `retry_after` > UTC_TIMESTAMP(6);

-- name: claim
-- Tries the keys of up to scan ready rows without waiting and keeps the first limit it gets, unlocking the rest at once; held = 1 where this connection now holds the row's key until unlock.
-- kinds: reads
WITH candidates AS (
  SELECT r.id, CASE WHEN GET_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.sessions'), 256), 24), ':', r.id), 0) = 1 THEN 1 ELSE 0 END AS locked
  FROM (
    SELECT `id` AS id
    FROM `sessions`
    WHERE (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
      AND NOT EXISTS (
        SELECT 1
        FROM `sessions` AS qgen_earlier
        WHERE qgen_earlier.`session` = `sessions`.`session`
          AND qgen_earlier.`id` < `sessions`.`id`
      )
      AND NOT EXISTS (
        SELECT 1
        FROM `sessions_pause` AS qgen_paused
        WHERE qgen_paused.queue_table = 'sessions'
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
SELECT id, CASE WHEN locked = 0 THEN 0 WHEN nth <= %(limit)s THEN 1 WHEN RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.sessions'), 256), 24), ':', id)) = 1 THEN 0 ELSE 0 END AS held
FROM counted;

-- name: take
-- Under their keys: reads which of the rows ids (a JSON array) are still claimable (a row not returned was settled since the claim: unlock it), then counts their attempt.
-- kinds: reads writes
SELECT `sessions`.`id` AS id, `payload` AS payload, `attempt` AS attempt
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `sessions` FORCE INDEX (PRIMARY) ON `sessions`.`id` = j.qgen_id
WHERE (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6));
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `sessions` FORCE INDEX (PRIMARY) ON `sessions`.`id` = j.qgen_id
SET `sessions`.`attempt` = `sessions`.`attempt` + 1;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM `sessions`
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM `sessions`
WHERE `id` = %(id)s;

-- name: retry_after
-- Returns the row delay_s seconds from now (the take already counted the attempt); then unlock.
-- kinds: writes
UPDATE `sessions`
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND
WHERE `id` = %(id)s;

-- name: ack_many
-- Under their keys: finishes the rows ids (a JSON array): deletes them; then unlock.
-- kinds: writes
DELETE `sessions`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `sessions` FORCE INDEX (PRIMARY) ON `sessions`.`id` = j.qgen_id;

-- name: drop_many
-- Under their keys: finishes poison messages exactly as ack_many does; then unlock.
-- kinds: writes
DELETE `sessions`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `sessions` FORCE INDEX (PRIMARY) ON `sessions`.`id` = j.qgen_id;

-- name: retry_after_many
-- Under their keys: returns the rows ids delay_s seconds from now (the take already counted the attempt); then unlock.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `sessions` FORCE INDEX (PRIMARY) ON `sessions`.`id` = j.qgen_id
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND;

-- name: dead_letter
-- At the cap: moves the row into sessions_dead, payload and count kept (a copy, then a delete, in one transaction).
-- kinds: writes writes
INSERT INTO `sessions_dead` (`id`, `payload`, `attempt`, `retry_after`, `session`)
SELECT `id`, `payload`, `attempt`, `retry_after`, `session`
FROM `sessions`
WHERE `id` = %(id)s;
DELETE FROM `sessions`
WHERE `id` = %(id)s;

-- name: unclaim
-- Under its key: undoes the take's count of a row whose handler never started (the consumer stopped); then unlock.
-- kinds: writes
UPDATE `sessions`
SET `attempt` = `attempt` - 1
WHERE `id` = %(id)s;

-- name: unlock
-- Releases the named locks of the rows ids (a JSON array) held by this session.
-- kinds: reads
SELECT RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.sessions'), 256), 24), ':', j.qgen_id)) AS unlocked
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: advisory holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, qgen_live.qgen_delayed AS `delayed`, NULL AS `in_flight`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM `sessions_dead`
    LIMIT %(count_limit)s
  ) AS qgen_dead
) AS `dead`, NULL AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `sessions_pause`
  WHERE queue_table = 'sessions'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `retry_after` > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT `id`, `retry_after`
    FROM `sessions`
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; pending otherwise, also while a consumer holds it: advisory holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, 'pending' AS `state`, `attempt` - 1 AS attempts, NULL AS `result`, NULL AS `progress`, NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM `sessions`
WHERE `id` = %(id)s
UNION ALL
SELECT `id` AS id, `payload` AS payload, 'dead' AS `state`, `attempt` - 1 AS attempts, NULL AS `result`, NULL AS `progress`, NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM `sessions_dead`
WHERE `id` = %(id)s;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `sessions_dead`
WHERE `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `sessions_dead`
WHERE `id` < %(after_id)s
ORDER BY `id` DESC
LIMIT %(limit)s;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt
FROM `sessions_dead`
WHERE `id` = %(id)s;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to sessions as first deliveries (attempt 1, no delay): moved, a copy then a delete in one transaction, so a message is never in both tables.
-- kinds: writes writes
INSERT INTO `sessions` (`id`, `payload`, `attempt`, `retry_after`, `session`)
SELECT `id`, `payload`, 1, NULL, `session`
FROM `sessions_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);
DELETE FROM `sessions_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes writes
INSERT INTO `sessions` (`id`, `payload`, `attempt`, `retry_after`, `session`)
SELECT `id`, `payload`, 1, NULL, `session`
FROM `sessions_dead`;
DELETE FROM `sessions_dead`;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE FROM `sessions_dead`
WHERE `id` IN (SELECT j.qgen_id FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j);

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM `sessions_dead`;

-- name: pause
-- Pauses sessions: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `sessions_pause` (queue_table, queue_group, paused_at)
VALUES ('sessions', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes sessions: the next claim lists its rows again.
-- kinds: writes
DELETE FROM `sessions_pause`
WHERE queue_table = 'sessions'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of sessions (`group` '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `sessions_pause`
WHERE queue_table = 'sessions'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, -(TIMESTAMPDIFF(MICROSECOND, `retry_after`, UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `sessions`
WHERE `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: advance
-- Brings the delayed messages (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE `sessions`
SET `retry_after` = `retry_after` - INTERVAL %(by_s)s SECOND
WHERE `retry_after` > UTC_TIMESTAMP(6);

-- name: fifo_waiting
-- Lists up to limit fifo keys with unfinished rows waiting behind the key's head (its earliest unfinished row), most waiting first, for the console's queue page.
-- kinds: reads
SELECT `session` AS fifo_key, MIN(`id`) AS head_id, COUNT(*) - 1 AS waiting
FROM `sessions`
WHERE `session` IS NOT NULL
GROUP BY `session`
HAVING COUNT(*) > 1
ORDER BY waiting DESC, head_id
LIMIT %(limit)s;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (another session holds its key; the key is tried, never waited for, then released); no row changed: in flight, already finished, dead, or no such id.
-- kinds: reads writes reads
SELECT %(id)s AS id
FROM DUAL
WHERE GET_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.sessions'), 256), 24), ':', %(id)s), 0) = 1;
DELETE FROM `sessions`
WHERE `id` = %(id)s;
SELECT RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.sessions'), 256), 24), ':', %(id)s)) AS unlocked;
