-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "reports"
-- dialect: "mysql"
-- form: "row_lock"
-- table: "reports_queue"
-- columns: {"id": "id", "payload": "payload", "group": "grp", "attempt": "attempt", "retry_after": "retry_after"}
-- max_attempts: 2
-- dead_letter: {"group": "reports_dead"}
-- default_group: "reports"
-- schedule_table: "reports_queue_schedules"
-- schedules: {"nightly": {"cron": "0 3 * * *", "timezone": "Europe/Paris", "payload": {"report": "daily"}, "catch_up": "latest", "catch_up_limit": 10}}
-- pause_table: "reports_queue_pause"
-- seal: sha256:3ef0c4ea41d452f3ce50a5a5965f3c7dff6614276cd4f2034b663183ae9156c8

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, the table that keeps each schedule's last slot, if missing.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS `reports_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `grp` VARCHAR(191) NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  INDEX `reports_queue_claim` (`grp`, `id`)
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
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now.
-- kinds: writes reads
INSERT INTO `reports_queue` (`payload`, `grp`, `retry_after`)
VALUES (%(payload)s, %(group)s, UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND);
SELECT LAST_INSERT_ID() AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -(TIMESTAMPDIFF(MICROSECOND, MIN(`retry_after`), UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `reports_queue`
WHERE `grp` = %(group)s
  AND `retry_after` > UTC_TIMESTAMP(6);

-- name: claim
-- Lists up to scan ready rows without locking them, locks up to limit of those still ready by primary key (locked rows skipped), then counts their delivery and marks them not ready for hold_s seconds (ids: the locked ids as a JSON array); one transaction, committed before they are handled (a delivery that kills its worker still counts); take then locks them.
-- kinds: reads reads writes
SELECT `id` AS id
FROM `reports_queue`
WHERE `grp` = %(group)s
  AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
  AND NOT EXISTS (
    SELECT 1
    FROM `reports_queue_pause` AS qgen_paused
    WHERE qgen_paused.queue_table = 'reports_queue'
      AND qgen_paused.queue_group IN ('', %(group)s)
  )
ORDER BY `id`
LIMIT %(scan)s;
SELECT `reports_queue`.`id` AS id
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
WHERE `grp` = %(group)s
  AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
SET `reports_queue`.`attempt` = `reports_queue`.`attempt` + 1, `reports_queue`.`retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(hold_s)s SECOND;

-- name: take
-- In the batch's transaction: locks the rows ids (a JSON array) the claim counted, by primary key, until the transaction ends; it waits for a claim that holds one for an instant (its mark keeps every claim from taking it), so no counted row is left unhandled.
-- kinds: reads
SELECT `reports_queue`.`id` AS id, `payload` AS payload, `attempt` - 1 AS attempt, `grp` AS `group`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
WHERE `reports_queue`.`grp` = %(group)s
ORDER BY `reports_queue`.`id`
FOR UPDATE;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM `reports_queue`
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM `reports_queue`
WHERE `id` = %(id)s;

-- name: retry
-- Returns the row at once by clearing the claim's mark (the claim already counted the attempt).
-- kinds: writes
UPDATE `reports_queue`
SET `retry_after` = NULL
WHERE `id` = %(id)s;

-- name: retry_after
-- Returns the row delay_s seconds from now (the claim already counted the attempt).
-- kinds: writes
UPDATE `reports_queue`
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND
WHERE `id` = %(id)s;

-- name: ack_many
-- In the claim's transaction: finishes the rows ids (a JSON array): deletes them.
-- kinds: writes
DELETE `reports_queue`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id;

-- name: drop_many
-- In the claim's transaction: finishes poison messages exactly as ack_many does.
-- kinds: writes
DELETE `reports_queue`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id;

-- name: retry_many
-- In the claim's transaction: returns the rows ids at once by clearing the claim's mark (the claim already counted their attempt).
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
SET `retry_after` = NULL;

-- name: retry_after_many
-- In the claim's transaction: returns the rows ids delay_s seconds from now.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND;

-- name: dead_letter_many
-- In the claim's transaction: at the cap, sets the group of the rows ids to the dead-letter group.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
SET `grp` = %(dead_group)s, `retry_after` = NULL;

-- name: dead_letter
-- At the cap: sets the row's group to the dead-letter group.
-- kinds: writes
UPDATE `reports_queue`
SET `grp` = %(dead_group)s, `retry_after` = NULL
WHERE `id` = %(id)s;

-- name: unclaim
-- In the batch's transaction: gives back a row whose handler never started (the consumer stops): the claim's count undone and its mark cleared.
-- kinds: writes
UPDATE `reports_queue`
SET `attempt` = `attempt` - 1, `retry_after` = NULL
WHERE `id` = %(id)s;

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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, qgen_live.qgen_delayed AS `delayed`, NULL AS `in_flight`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM `reports_queue`
    WHERE `grp` = %(dead_group)s
    LIMIT %(count_limit)s
  ) AS qgen_dead
) AS `dead`, NULL AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `reports_queue_pause`
  WHERE queue_table = 'reports_queue'
    AND queue_group IN ('', %(group)s)
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `retry_after` > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT `id`, `retry_after`
    FROM `reports_queue`
    WHERE `grp` = %(group)s
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, CASE WHEN `grp` = %(dead_group)s THEN 'dead' ELSE 'pending' END AS `state`, `attempt` - 1 AS attempts, NULL AS `result`, NULL AS `progress`, NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM `reports_queue`
WHERE `id` = %(id)s;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `grp` AS `group`
FROM `reports_queue`
WHERE `grp` = %(dead_group)s
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `grp` AS `group`
FROM `reports_queue`
WHERE `grp` = %(dead_group)s
  AND `id` < %(after_id)s
ORDER BY `id` DESC
LIMIT %(limit)s;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `grp` AS `group`
FROM `reports_queue`
WHERE `grp` = %(dead_group)s
  AND `id` = %(id)s;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to the live group (group) as first deliveries (attempt 1, no delay).
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
SET `grp` = %(group)s, `attempt` = 1, `retry_after` = NULL
WHERE `grp` = %(dead_group)s;

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes
UPDATE `reports_queue`
SET `grp` = %(group)s, `attempt` = 1, `retry_after` = NULL
WHERE `grp` = %(dead_group)s;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE `reports_queue`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
WHERE `grp` = %(dead_group)s;

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM `reports_queue`
WHERE `grp` = %(dead_group)s;

-- name: pause
-- Pauses reports_queue for group ('': every group): no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `reports_queue_pause` (queue_table, queue_group, paused_at)
VALUES ('reports_queue', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes reports_queue for group ('': the pause of every group; a group paused on its own stays paused): the next claim lists its rows again.
-- kinds: writes
DELETE FROM `reports_queue_pause`
WHERE queue_table = 'reports_queue'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of reports_queue (`group` '': every group) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `reports_queue_pause`
WHERE queue_table = 'reports_queue'
ORDER BY queue_group;

-- name: groups
-- Counts the unfinished rows of each group of the table, for `qgen verify`: rows in a group no declared queue claims (a queue renamed, its group with it) wait forever.
-- kinds: reads
SELECT `grp` AS `group`, COUNT(*) AS pending
FROM `reports_queue`
GROUP BY `grp`
ORDER BY `grp`;

-- name: group_names
-- Lists the groups of the table that hold unfinished rows, for the console's overview: one index probe per group, where groups counts every row.
-- kinds: reads
SELECT DISTINCT `grp` AS `group`
FROM `reports_queue`
ORDER BY `grp`;

-- name: regroup
-- Moves the unfinished rows of group from_group to group (`qgen regroup`): rows a renamed queue left behind.
-- kinds: writes
UPDATE `reports_queue`
SET `grp` = %(group)s
WHERE `grp` = %(from_group)s;

-- name: pending_list
-- Lists up to limit pending messages of group (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `grp` AS `group`, -(TIMESTAMPDIFF(MICROSECOND, `retry_after`, UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `reports_queue`
WHERE `grp` = %(group)s
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: advance
-- Brings the delayed messages of group (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE `reports_queue`
SET `retry_after` = `retry_after` - INTERVAL %(by_s)s SECOND
WHERE `grp` = %(group)s
  AND `retry_after` > UTC_TIMESTAMP(6);

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
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a claim's transaction holds the row: SKIP LOCKED passes it by); no row changed: in flight, already finished, dead, or no such id.
-- kinds: reads writes
SELECT `id` AS id
FROM `reports_queue`
WHERE `id` = %(id)s AND `grp` <> %(dead_group)s
FOR UPDATE SKIP LOCKED;
DELETE FROM `reports_queue`
WHERE `id` = %(id)s;

-- name: custom.defer
-- The service's own event 'defer', run in place of the outcome's own statement.
-- kinds: writes writes
UPDATE reports_queue SET grp = 'reports_later' WHERE id = %(id)s;
UPDATE reports_queue SET attempt = 1 WHERE id = %(id)s;
