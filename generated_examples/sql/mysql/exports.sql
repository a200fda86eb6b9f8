-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "exports"
-- dialect: "mysql"
-- form: "advisory"
-- table: "exports_queue"
-- columns: {"id": "id", "payload": "payload", "group": "lane", "attempt": "attempt", "retry_after": "retry_after"}
-- max_attempts: 2
-- dead_letter: {"group": "exports_dead"}
-- default_group: "exports"
-- pause_table: "exports_queue_pause"
-- seal: sha256:040e50591798402447911e1f5ff65a67a365ed7da7fca7601200be20fdc01ded

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS `exports_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `lane` VARCHAR(191) NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  INDEX `exports_queue_claim` (`lane`, `id`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `exports_queue_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now.
-- kinds: writes reads
INSERT INTO `exports_queue` (`payload`, `lane`, `retry_after`)
VALUES (%(payload)s, %(group)s, UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND);
SELECT LAST_INSERT_ID() AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -(TIMESTAMPDIFF(MICROSECOND, MIN(`retry_after`), UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `exports_queue`
WHERE `lane` = %(group)s
  AND `retry_after` > UTC_TIMESTAMP(6);

-- name: claim
-- Tries the keys of up to scan ready rows without waiting and keeps the first limit it gets, unlocking the rest at once; held = 1 where this connection now holds the row's key until unlock.
-- kinds: reads
WITH candidates AS (
  SELECT r.id, CASE WHEN GET_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.exports_queue'), 256), 24), ':', r.id), 0) = 1 THEN 1 ELSE 0 END AS locked
  FROM (
    SELECT `id` AS id
    FROM `exports_queue`
    WHERE `lane` = %(group)s
      AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
      AND NOT EXISTS (
        SELECT 1
        FROM `exports_queue_pause` AS qgen_paused
        WHERE qgen_paused.queue_table = 'exports_queue'
          AND qgen_paused.queue_group IN ('', %(group)s)
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
SELECT id, CASE WHEN locked = 0 THEN 0 WHEN nth <= %(limit)s THEN 1 WHEN RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.exports_queue'), 256), 24), ':', id)) = 1 THEN 0 ELSE 0 END AS held
FROM counted;

-- name: take
-- Under their keys: reads which of the rows ids (a JSON array) are still claimable (a row not returned was settled since the claim: unlock it), then counts their attempt.
-- kinds: reads writes
SELECT `exports_queue`.`id` AS id, `payload` AS payload, `attempt` AS attempt, `lane` AS `group`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `exports_queue` FORCE INDEX (PRIMARY) ON `exports_queue`.`id` = j.qgen_id
WHERE `lane` = %(group)s
  AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6));
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `exports_queue` FORCE INDEX (PRIMARY) ON `exports_queue`.`id` = j.qgen_id
SET `exports_queue`.`attempt` = `exports_queue`.`attempt` + 1;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM `exports_queue`
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM `exports_queue`
WHERE `id` = %(id)s;

-- name: retry_after
-- The table's own statement for retry_after (declared in statements.retry_after).
-- kinds: writes
UPDATE exports_queue SET retry_after = UTC_TIMESTAMP(6) + INTERVAL (%(delay_s)s * 2) SECOND WHERE id = %(id)s;

-- name: ack_many
-- Under their keys: finishes the rows ids (a JSON array): deletes them; then unlock.
-- kinds: writes
DELETE `exports_queue`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `exports_queue` FORCE INDEX (PRIMARY) ON `exports_queue`.`id` = j.qgen_id;

-- name: drop_many
-- Under their keys: finishes poison messages exactly as ack_many does; then unlock.
-- kinds: writes
DELETE `exports_queue`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `exports_queue` FORCE INDEX (PRIMARY) ON `exports_queue`.`id` = j.qgen_id;

-- name: dead_letter_many
-- Under their keys: at the cap, sets the group of the rows ids to the dead-letter group (the take already counted the attempt); then unlock.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `exports_queue` FORCE INDEX (PRIMARY) ON `exports_queue`.`id` = j.qgen_id
SET `lane` = %(dead_group)s;

-- name: dead_letter
-- At the cap: sets the row's group to the dead-letter group.
-- kinds: writes
UPDATE `exports_queue`
SET `lane` = %(dead_group)s
WHERE `id` = %(id)s;

-- name: unclaim
-- Under its key: undoes the take's count of a row whose handler never started (the consumer stopped); then unlock.
-- kinds: writes
UPDATE `exports_queue`
SET `attempt` = `attempt` - 1
WHERE `id` = %(id)s;

-- name: unlock
-- Releases the named locks of the rows ids (a JSON array) held by this session.
-- kinds: reads
SELECT RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.exports_queue'), 256), 24), ':', j.qgen_id)) AS unlocked
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: advisory holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, qgen_live.qgen_delayed AS `delayed`, NULL AS `in_flight`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM `exports_queue`
    WHERE `lane` = %(dead_group)s
    LIMIT %(count_limit)s
  ) AS qgen_dead
) AS `dead`, NULL AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `exports_queue_pause`
  WHERE queue_table = 'exports_queue'
    AND queue_group IN ('', %(group)s)
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `retry_after` > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT `id`, `retry_after`
    FROM `exports_queue`
    WHERE `lane` = %(group)s
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; pending otherwise, also while a consumer holds it: advisory holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, CASE WHEN `lane` = %(dead_group)s THEN 'dead' ELSE 'pending' END AS `state`, `attempt` - 1 AS attempts, NULL AS `result`, NULL AS `progress`, NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM `exports_queue`
WHERE `id` = %(id)s;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `lane` AS `group`
FROM `exports_queue`
WHERE `lane` = %(dead_group)s
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `lane` AS `group`
FROM `exports_queue`
WHERE `lane` = %(dead_group)s
  AND `id` < %(after_id)s
ORDER BY `id` DESC
LIMIT %(limit)s;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `lane` AS `group`
FROM `exports_queue`
WHERE `lane` = %(dead_group)s
  AND `id` = %(id)s;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to the live group (group) as first deliveries (attempt 1, no delay).
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `exports_queue` FORCE INDEX (PRIMARY) ON `exports_queue`.`id` = j.qgen_id
SET `lane` = %(group)s, `attempt` = 1, `retry_after` = NULL
WHERE `lane` = %(dead_group)s;

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes
UPDATE `exports_queue`
SET `lane` = %(group)s, `attempt` = 1, `retry_after` = NULL
WHERE `lane` = %(dead_group)s;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE `exports_queue`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `exports_queue` FORCE INDEX (PRIMARY) ON `exports_queue`.`id` = j.qgen_id
WHERE `lane` = %(dead_group)s;

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM `exports_queue`
WHERE `lane` = %(dead_group)s;

-- name: pause
-- Pauses exports_queue for group ('': every group): no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `exports_queue_pause` (queue_table, queue_group, paused_at)
VALUES ('exports_queue', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes exports_queue for group ('': the pause of every group; a group paused on its own stays paused): the next claim lists its rows again.
-- kinds: writes
DELETE FROM `exports_queue_pause`
WHERE queue_table = 'exports_queue'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of exports_queue (`group` '': every group) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `exports_queue_pause`
WHERE queue_table = 'exports_queue'
ORDER BY queue_group;

-- name: groups
-- Counts the unfinished rows of each group of the table, for `qgen verify`: rows in a group no declared queue claims (a queue renamed, its group with it) wait forever.
-- kinds: reads
SELECT `lane` AS `group`, COUNT(*) AS pending
FROM `exports_queue`
GROUP BY `lane`
ORDER BY `lane`;

-- name: group_names
-- Lists the groups of the table that hold unfinished rows, for the console's overview: one index probe per group, where groups counts every row.
-- kinds: reads
SELECT DISTINCT `lane` AS `group`
FROM `exports_queue`
ORDER BY `lane`;

-- name: regroup
-- Moves the unfinished rows of group from_group to group (`qgen regroup`): rows a renamed queue left behind.
-- kinds: writes
UPDATE `exports_queue`
SET `lane` = %(group)s
WHERE `lane` = %(from_group)s;

-- name: pending_list
-- Lists up to limit pending messages of group (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `lane` AS `group`, -(TIMESTAMPDIFF(MICROSECOND, `retry_after`, UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `exports_queue`
WHERE `lane` = %(group)s
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: advance
-- Brings the delayed messages of group (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE `exports_queue`
SET `retry_after` = `retry_after` - INTERVAL %(by_s)s SECOND
WHERE `lane` = %(group)s
  AND `retry_after` > UTC_TIMESTAMP(6);

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (another session holds its key; the key is tried, never waited for, then released); no row changed: in flight, already finished, dead, or no such id.
-- kinds: reads writes reads
SELECT %(id)s AS id
FROM DUAL
WHERE GET_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.exports_queue'), 256), 24), ':', %(id)s), 0) = 1;
DELETE FROM `exports_queue`
WHERE `id` = %(id)s AND `lane` <> %(dead_group)s;
SELECT RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.exports_queue'), 256), 24), ':', %(id)s)) AS unlocked;
