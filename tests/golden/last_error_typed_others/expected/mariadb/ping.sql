-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "ping"
-- dialect: "mariadb"
-- form: "advisory"
-- table: "ping_queue"
-- columns: {"id": "id", "payload": "payload", "last_error": "last_error"}
-- max_attempts: null
-- dead_letter: null
-- pause_table: "ping_queue_pause"
-- seal: sha256:0e97355196426a856a279a47ff02a66f7001317b1620b4bc8b67cfc2522486cc

-- name: schema
-- Creates the queue table, the table of paused scopes, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS `ping_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `last_error` TEXT NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `ping_queue_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message.
-- kinds: writes reads
INSERT INTO `ping_queue` (`payload`)
VALUES (%(payload)s);
SELECT LAST_INSERT_ID() AS id;

-- name: claim
-- Tries the keys of up to scan ready rows without waiting and keeps the first limit it gets, unlocking the rest at once; held = 1 where this connection now holds the row's key until unlock.
-- kinds: reads
WITH candidates AS (
  SELECT r.id, CASE WHEN GET_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.ping_queue'), 256), 24), ':', r.id), 0) = 1 THEN 1 ELSE 0 END AS locked
  FROM (
    SELECT `id` AS id
    FROM `ping_queue`
    WHERE NOT EXISTS (
        SELECT 1
        FROM `ping_queue_pause` AS qgen_paused
        WHERE qgen_paused.queue_table = 'ping_queue'
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
SELECT id, CASE WHEN locked = 0 THEN 0 WHEN nth <= %(limit)s THEN 1 WHEN RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.ping_queue'), 256), 24), ':', id)) = 1 THEN 0 ELSE 0 END AS held
FROM counted;

-- name: take
-- Under their keys: reads which of the rows ids (a JSON array) are still claimable (a row not returned was settled since the claim: unlock it).
-- kinds: reads
SELECT `ping_queue`.`id` AS id, `payload` AS payload
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `ping_queue` FORCE INDEX (PRIMARY) ON `ping_queue`.`id` = j.qgen_id;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM `ping_queue`
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM `ping_queue`
WHERE `id` = %(id)s;

-- name: retry
-- Under its key: returns the row at once (the take already counted the attempt); records why in last_error; then unlock.
-- kinds: writes
UPDATE `ping_queue`
SET `last_error` = %(error)s
WHERE `id` = %(id)s;

-- name: ack_many
-- Under their keys: finishes the rows ids (a JSON array): deletes them; then unlock.
-- kinds: writes
DELETE `ping_queue`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `ping_queue` FORCE INDEX (PRIMARY) ON `ping_queue`.`id` = j.qgen_id;

-- name: drop_many
-- Under their keys: finishes poison messages exactly as ack_many does; then unlock.
-- kinds: writes
DELETE `ping_queue`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `ping_queue` FORCE INDEX (PRIMARY) ON `ping_queue`.`id` = j.qgen_id;

-- name: retry_many
-- Under their keys: returns the rows ids at once (the take already counted the attempt); records why in last_error; then unlock.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `ping_queue` FORCE INDEX (PRIMARY) ON `ping_queue`.`id` = j.qgen_id
SET `last_error` = %(error)s;

-- name: unlock
-- Releases the named locks of the rows ids (a JSON array) held by this session.
-- kinds: reads
SELECT RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.ping_queue'), 256), 24), ':', j.qgen_id)) AS unlocked
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: advisory holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (NULL: no dead letter), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), last_error (why the newest unfinished row that failed failed), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, 0 AS `delayed`, NULL AS `in_flight`, NULL AS `dead`, NULL AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT `last_error`
  FROM `ping_queue`
  WHERE `last_error` IS NOT NULL
  ORDER BY `id` DESC
  LIMIT 1
) AS `last_error`, (
  SELECT COUNT(*)
  FROM `ping_queue_pause`
  WHERE queue_table = 'ping_queue'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COUNT(*) AS qgen_ready
  FROM (
    SELECT `id`
    FROM `ping_queue`
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (pending otherwise, also while a consumer holds it: advisory holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, 'pending' AS `state`, NULL AS attempts, NULL AS `result`, NULL AS `progress`, `last_error` AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM `ping_queue`
WHERE `id` = %(id)s;

-- name: pause
-- Pauses ping_queue: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `ping_queue_pause` (queue_table, queue_group, paused_at)
VALUES ('ping_queue', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes ping_queue: the next claim lists its rows again.
-- kinds: writes
DELETE FROM `ping_queue_pause`
WHERE queue_table = 'ping_queue'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of ping_queue (`group` '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `ping_queue_pause`
WHERE queue_table = 'ping_queue'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `last_error` AS last_error
FROM `ping_queue`
WHERE `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (another session holds its key; the key is tried, never waited for, then released); no row changed: in flight, already finished, dead, or no such id.
-- kinds: reads writes reads
SELECT %(id)s AS id
FROM DUAL
WHERE GET_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.ping_queue'), 256), 24), ':', %(id)s), 0) = 1;
DELETE FROM `ping_queue`
WHERE `id` = %(id)s;
SELECT RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.ping_queue'), 256), 24), ':', %(id)s)) AS unlocked;
