-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "audit"
-- dialect: "mariadb"
-- form: "row_lock"
-- table: "audit_queue"
-- columns: {"id": "id", "payload": "payload", "group": "queue", "attempt": "attempt", "retry_after": "retry_after", "processed_at": "processed_at", "last_error": "why"}
-- max_attempts: 5
-- dead_letter: {"group": "audit_dead"}
-- default_group: "audit"
-- other_columns: ["source"]
-- pause_table: "audit_queue_pause"
-- seal: sha256:1912c2899b55da57b4e06c78383e532fddece0fcd7080492a95ba6e71d25e18d

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS `audit_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `queue` VARCHAR(191) NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  `processed_at` DATETIME(6) NULL,
  `why` TEXT NULL,
  `source` TEXT NULL,
  INDEX `audit_queue_claim` (`queue`, `processed_at`, `id`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `audit_queue_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message; a non-NULL delay_s makes it claimable only that many seconds from now; value_<column> gives each other column its value.
-- kinds: writes reads
INSERT INTO `audit_queue` (`payload`, `queue`, `retry_after`, `source`)
VALUES (%(payload)s, %(group)s, UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, %(value_source)s);
SELECT LAST_INSERT_ID() AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -(TIMESTAMPDIFF(MICROSECOND, MIN(`retry_after`), UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `audit_queue`
WHERE `queue` = %(group)s
  AND `processed_at` IS NULL
  AND `retry_after` > UTC_TIMESTAMP(6);

-- name: claim
-- Lists up to scan ready rows without locking them, locks up to limit of those still ready by primary key (locked rows skipped), then counts their delivery and marks them not ready for hold_s seconds (ids: the locked ids as a JSON array); one transaction, committed before they are handled (a delivery that kills its worker still counts); take then locks them.
-- kinds: reads reads writes
SELECT `id` AS id
FROM `audit_queue`
WHERE `queue` = %(group)s
  AND `processed_at` IS NULL
  AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
  AND NOT EXISTS (
    SELECT 1
    FROM `audit_queue_pause` AS qgen_paused
    WHERE qgen_paused.queue_table = 'audit_queue'
      AND qgen_paused.queue_group IN ('', %(group)s)
  )
ORDER BY `id`
LIMIT %(scan)s;
SELECT `audit_queue`.`id` AS id
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
WHERE `queue` = %(group)s
  AND `processed_at` IS NULL
  AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
SET `audit_queue`.`attempt` = `audit_queue`.`attempt` + 1, `audit_queue`.`retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(hold_s)s SECOND;

-- name: take
-- In the batch's transaction: locks the rows ids (a JSON array) the claim counted, by primary key, until the transaction ends; it waits for a claim that holds one for an instant (its mark keeps every claim from taking it), so no counted row is left unhandled.
-- kinds: reads
SELECT `audit_queue`.`id` AS id, `payload` AS payload, `attempt` - 1 AS attempt, `queue` AS `group`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
WHERE `audit_queue`.`processed_at` IS NULL
  AND `audit_queue`.`queue` = %(group)s
ORDER BY `audit_queue`.`id`
FOR UPDATE;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE `audit_queue`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE `audit_queue`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;

-- name: retry
-- Returns the row at once by clearing the claim's mark (the claim already counted the attempt); records why in why.
-- kinds: writes
UPDATE `audit_queue`
SET `retry_after` = NULL, `why` = %(error)s
WHERE `id` = %(id)s;

-- name: retry_after
-- Returns the row delay_s seconds from now (the claim already counted the attempt); records why in why.
-- kinds: writes
UPDATE `audit_queue`
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, `why` = %(error)s
WHERE `id` = %(id)s;

-- name: ack_many
-- In the claim's transaction: finishes the rows ids (a JSON array): marks them processed.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
SET `processed_at` = UTC_TIMESTAMP(6);

-- name: drop_many
-- In the claim's transaction: finishes poison messages exactly as ack_many does.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
SET `processed_at` = UTC_TIMESTAMP(6);

-- name: retry_many
-- In the claim's transaction: returns the rows ids at once by clearing the claim's mark (the claim already counted their attempt); records why in why.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
SET `retry_after` = NULL, `why` = %(error)s;

-- name: retry_after_many
-- In the claim's transaction: returns the rows ids delay_s seconds from now; records why in why.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, `why` = %(error)s;

-- name: dead_letter_many
-- In the claim's transaction: at the cap, sets the group of the rows ids to the dead-letter group; records why in why.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
SET `queue` = %(dead_group)s, `retry_after` = NULL, `why` = %(error)s;

-- name: dead_letter
-- At the cap: sets the row's group to the dead-letter group; records why in why.
-- kinds: writes
UPDATE `audit_queue`
SET `queue` = %(dead_group)s, `retry_after` = NULL, `why` = %(error)s
WHERE `id` = %(id)s;

-- name: unclaim
-- In the batch's transaction: gives back a row whose handler never started (the consumer stops): the claim's count undone and its mark cleared.
-- kinds: writes
UPDATE `audit_queue`
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (in the dead letter, counted up to count_limit rows), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (NULL: no enqueued_at column), last_error (why the newest unfinished row that failed failed) and dead_last_error (why the newest dead message died), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, qgen_live.qgen_delayed AS `delayed`, NULL AS `in_flight`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM `audit_queue`
    WHERE `queue` = %(dead_group)s
      AND `processed_at` IS NULL
    LIMIT %(count_limit)s
  ) AS qgen_dead
) AS `dead`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM `audit_queue`
    WHERE `queue` = %(group)s
      AND `processed_at` IS NOT NULL
    LIMIT %(processed_limit)s
  ) AS qgen_kept
) AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT `why`
  FROM `audit_queue`
  WHERE `queue` = %(group)s
    AND `processed_at` IS NULL
    AND `why` IS NOT NULL
  ORDER BY `id` DESC
  LIMIT 1
) AS `last_error`, (
  SELECT `why`
  FROM `audit_queue`
  WHERE `queue` = %(dead_group)s
    AND `processed_at` IS NULL
    AND `why` IS NOT NULL
  ORDER BY `id` DESC
  LIMIT 1
) AS `dead_last_error`, (
  SELECT COUNT(*)
  FROM `audit_queue_pause`
  WHERE queue_table = 'audit_queue'
    AND queue_group IN ('', %(group)s)
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `retry_after` > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_delayed
  FROM (
    SELECT `id`, `retry_after`
    FROM `audit_queue`
    WHERE `queue` = %(group)s
      AND `processed_at` IS NULL
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; done: marked processed; pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, CASE WHEN `queue` = %(dead_group)s AND `processed_at` IS NULL THEN 'dead' WHEN `processed_at` IS NOT NULL THEN 'done' ELSE 'pending' END AS `state`, `attempt` - 1 AS attempts, NULL AS `result`, NULL AS `progress`, `why` AS last_error, NULL AS enqueued_at, `processed_at` AS processed_at
FROM `audit_queue`
WHERE `id` = %(id)s;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `queue` AS `group`, `why` AS last_error
FROM `audit_queue`
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `queue` AS `group`, `why` AS last_error
FROM `audit_queue`
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL
  AND `id` < %(after_id)s
ORDER BY `id` DESC
LIMIT %(limit)s;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `queue` AS `group`, `why` AS last_error
FROM `audit_queue`
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL
  AND `id` = %(id)s;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to the live group (group) as first deliveries (attempt 1, no delay).
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
SET `queue` = %(group)s, `attempt` = 1, `retry_after` = NULL
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL;

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes
UPDATE `audit_queue`
SET `queue` = %(group)s, `attempt` = 1, `retry_after` = NULL
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE `audit_queue`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL;

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM `audit_queue`
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL;

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM `audit_queue`
WHERE `queue` = %(group)s
  AND `processed_at` < UTC_TIMESTAMP(6) - INTERVAL %(age_s)s SECOND
ORDER BY `processed_at`, `id`
LIMIT %(batch)s;

-- name: pause
-- Pauses audit_queue for group ('': every group): no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `audit_queue_pause` (queue_table, queue_group, paused_at)
VALUES ('audit_queue', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes audit_queue for group ('': the pause of every group; a group paused on its own stays paused): the next claim lists its rows again.
-- kinds: writes
DELETE FROM `audit_queue_pause`
WHERE queue_table = 'audit_queue'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of audit_queue (`group` '': every group) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `audit_queue_pause`
WHERE queue_table = 'audit_queue'
ORDER BY queue_group;

-- name: groups
-- Counts the unfinished rows of each group of the table, for `qgen verify`: rows in a group no declared queue claims (a queue renamed, its group with it) wait forever.
-- kinds: reads
SELECT `queue` AS `group`, COUNT(*) AS pending
FROM `audit_queue`
WHERE `processed_at` IS NULL
GROUP BY `queue`
ORDER BY `queue`;

-- name: group_names
-- Lists the groups of the table that hold unfinished rows, for the console's overview: one index probe per group, where groups counts every row.
-- kinds: reads
SELECT DISTINCT `queue` AS `group`
FROM `audit_queue`
WHERE `processed_at` IS NULL
ORDER BY `queue`;

-- name: regroup
-- Moves the unfinished rows of group from_group to group (`qgen regroup`): rows a renamed queue left behind.
-- kinds: writes
UPDATE `audit_queue`
SET `queue` = %(group)s
WHERE `queue` = %(from_group)s
  AND `processed_at` IS NULL;

-- name: pending_list
-- Lists up to limit pending messages of group (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `queue` AS `group`, `why` AS last_error, -(TIMESTAMPDIFF(MICROSECOND, `retry_after`, UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `audit_queue`
WHERE `queue` = %(group)s
  AND `processed_at` IS NULL
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: advance
-- Brings the delayed messages of group (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE `audit_queue`
SET `retry_after` = `retry_after` - INTERVAL %(by_s)s SECOND
WHERE `queue` = %(group)s
  AND `processed_at` IS NULL
  AND `retry_after` > UTC_TIMESTAMP(6);

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6)) AS minute, COUNT(*) AS n
FROM `audit_queue`
WHERE `queue` = %(group)s
  AND `processed_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND
GROUP BY TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6))
ORDER BY minute;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (a claim's transaction holds the row: SKIP LOCKED passes it by); no row changed: in flight, already finished, dead, or no such id.
-- kinds: reads writes
SELECT `id` AS id
FROM `audit_queue`
WHERE `id` = %(id)s AND `processed_at` IS NULL AND `queue` <> %(dead_group)s
FOR UPDATE SKIP LOCKED;
UPDATE `audit_queue`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;
