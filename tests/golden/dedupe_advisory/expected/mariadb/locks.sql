-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "locks"
-- dialect: "mariadb"
-- form: "advisory"
-- table: "locks"
-- columns: {"id": "id", "payload": "payload", "processed_at": "processed_at", "dedupe_key": "dedupe_key"}
-- max_attempts: null
-- dead_letter: null
-- pause_table: "locks_pause"
-- seal: sha256:552ff175390096846678a697ffad8b3c172f2e21e75c3883a34f2c7fc7dd238b

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, the unique index that keeps one pending message per dedupe_key, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS `locks` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `processed_at` DATETIME(6) NULL,
  `dedupe_key` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  `qgen_pending_key` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin GENERATED ALWAYS AS (CASE WHEN `processed_at` IS NULL THEN `dedupe_key` END) STORED,
  INDEX `locks_claim` (`processed_at`, `id`),
  UNIQUE INDEX `locks_dedupe` (`qgen_pending_key`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `locks_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message; a dedupe_key a pending message already holds adds nothing and returns no new id (enqueue_existing reads the pending one).
-- kinds: reads writes reads
SELECT 1 AS locked
FROM DUAL
WHERE CASE WHEN %(dedupe_key)s IS NULL THEN 1 ELSE GET_LOCK(CONCAT('qgen-key:', LEFT(SHA2(CONCAT(DATABASE(), '.locks:', %(dedupe_key)s), 256), 40)), 10) END = 1;
INSERT IGNORE INTO `locks` (`payload`, `dedupe_key`)
VALUES (%(payload)s, %(dedupe_key)s);
SELECT CASE WHEN ROW_COUNT() = 1 THEN LAST_INSERT_ID() END AS id, CASE WHEN %(dedupe_key)s IS NULL THEN NULL ELSE RELEASE_LOCK(CONCAT('qgen-key:', LEFT(SHA2(CONCAT(DATABASE(), '.locks:', %(dedupe_key)s), 256), 40))) END AS unlocked;

-- name: enqueue_existing
-- Reads the id of the pending message (not processed, not dead) that holds dedupe_key: the one a duplicate enqueue returns.
-- kinds: reads
SELECT `id` AS id
FROM `locks`
WHERE `qgen_pending_key` = %(dedupe_key)s;

-- name: enqueue_unlock
-- Releases the key's named lock after an enqueue failed between taking and releasing it (the lock is the session's: a rollback keeps it).
-- kinds: reads
SELECT CASE WHEN %(dedupe_key)s IS NULL THEN NULL ELSE RELEASE_LOCK(CONCAT('qgen-key:', LEFT(SHA2(CONCAT(DATABASE(), '.locks:', %(dedupe_key)s), 256), 40))) END AS unlocked;

-- name: claim
-- Tries the keys of up to scan ready rows without waiting and keeps the first limit it gets, unlocking the rest at once; held = 1 where this connection now holds the row's key until unlock.
-- kinds: reads
WITH candidates AS (
  SELECT r.id, CASE WHEN GET_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.locks'), 256), 24), ':', r.id), 0) = 1 THEN 1 ELSE 0 END AS locked
  FROM (
    SELECT `id` AS id
    FROM `locks`
    WHERE `processed_at` IS NULL
      AND NOT EXISTS (
        SELECT 1
        FROM `locks_pause` AS qgen_paused
        WHERE qgen_paused.queue_table = 'locks'
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
SELECT id, CASE WHEN locked = 0 THEN 0 WHEN nth <= %(limit)s THEN 1 WHEN RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.locks'), 256), 24), ':', id)) = 1 THEN 0 ELSE 0 END AS held
FROM counted;

-- name: take
-- Under their keys: reads which of the rows ids (a JSON array) are still claimable (a row not returned was settled since the claim: unlock it).
-- kinds: reads
SELECT `locks`.`id` AS id, `payload` AS payload
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `locks` FORCE INDEX (PRIMARY) ON `locks`.`id` = j.qgen_id
WHERE `processed_at` IS NULL;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE `locks`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE `locks`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;

-- name: ack_many
-- Under their keys: finishes the rows ids (a JSON array): marks them processed; then unlock.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `locks` FORCE INDEX (PRIMARY) ON `locks`.`id` = j.qgen_id
SET `processed_at` = UTC_TIMESTAMP(6);

-- name: drop_many
-- Under their keys: finishes poison messages exactly as ack_many does; then unlock.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `locks` FORCE INDEX (PRIMARY) ON `locks`.`id` = j.qgen_id
SET `processed_at` = UTC_TIMESTAMP(6);

-- name: unlock
-- Releases the named locks of the rows ids (a JSON array) held by this session.
-- kinds: reads
SELECT RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.locks'), 256), 24), ':', j.qgen_id)) AS unlocked
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: advisory holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (NULL: no dead letter), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, 0 AS `delayed`, NULL AS `in_flight`, NULL AS `dead`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM `locks`
    WHERE `processed_at` IS NOT NULL
    LIMIT %(processed_limit)s
  ) AS qgen_kept
) AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `locks_pause`
  WHERE queue_table = 'locks'
    AND queue_group = ''
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COUNT(*) AS qgen_ready
  FROM (
    SELECT `id`
    FROM `locks`
    WHERE `processed_at` IS NULL
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (done: marked processed; pending otherwise, also while a consumer holds it: advisory holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, CASE WHEN `processed_at` IS NOT NULL THEN 'done' ELSE 'pending' END AS `state`, NULL AS attempts, NULL AS `result`, NULL AS `progress`, NULL AS last_error, NULL AS enqueued_at, `processed_at` AS processed_at
FROM `locks`
WHERE `id` = %(id)s;

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM `locks`
WHERE `processed_at` < UTC_TIMESTAMP(6) - INTERVAL %(age_s)s SECOND
ORDER BY `processed_at`, `id`
LIMIT %(batch)s;

-- name: pause
-- Pauses locks: no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `locks_pause` (queue_table, queue_group, paused_at)
VALUES ('locks', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes locks: the next claim lists its rows again.
-- kinds: writes
DELETE FROM `locks_pause`
WHERE queue_table = 'locks'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of locks (`group` '': the whole table) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `locks_pause`
WHERE queue_table = 'locks'
ORDER BY queue_group;

-- name: pending_list
-- Lists up to limit pending messages (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload
FROM `locks`
WHERE `processed_at` IS NULL
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6)) AS minute, COUNT(*) AS n
FROM `locks`
WHERE `processed_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND
GROUP BY TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6))
ORDER BY minute;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (another session holds its key; the key is tried, never waited for, then released); no row changed: in flight, already finished, dead, or no such id.
-- kinds: reads writes reads
SELECT %(id)s AS id
FROM DUAL
WHERE GET_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.locks'), 256), 24), ':', %(id)s), 0) = 1;
UPDATE `locks`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s AND `processed_at` IS NULL;
SELECT RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.locks'), 256), 24), ':', %(id)s)) AS unlocked;
