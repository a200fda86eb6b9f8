-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "tasks"
-- dialect: "mariadb"
-- form: "lease"
-- table: "shop_tasks"
-- columns: {"id": "id", "payload": "payload", "group": "queue", "attempt": "attempt", "priority": "priority", "retry_after": "retry_after", "locked_until": "locked_until", "processed_at": "processed_at", "enqueued_at": "enqueued_at", "last_error": "last_error", "result": "result"}
-- max_attempts: 2
-- dead_letter: {"group": "tasks_dead"}
-- lease_s: 60
-- default_group: "tasks"
-- pause_table: "shop_tasks_pause"
-- seal: sha256:0255ad8fb2e86ebb164d202db14f01db58a57d613c79c8880716472e544a487f

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, if missing.
-- kinds: writes writes
CREATE TABLE IF NOT EXISTS `shop_tasks` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `queue` VARCHAR(191) NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  `retry_after` DATETIME(6) NULL,
  `locked_until` DATETIME(6) NULL,
  `processed_at` DATETIME(6) NULL,
  `enqueued_at` DATETIME(6) NULL,
  `priority` INT NOT NULL DEFAULT 0,
  `last_error` TEXT NULL,
  `result` JSON NULL,
  INDEX `shop_tasks_claim` (`queue`, `processed_at`, `priority` DESC, `id`, `enqueued_at`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `shop_tasks_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message stamped with the database's clock; a non-NULL delay_s makes it claimable only that many seconds from now; priority orders the claim (higher first; NULL: 0).
-- kinds: writes reads
INSERT INTO `shop_tasks` (`payload`, `queue`, `retry_after`, `enqueued_at`, `priority`)
VALUES (%(payload)s, %(group)s, UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, UTC_TIMESTAMP(6), COALESCE(%(priority)s, 0));
SELECT LAST_INSERT_ID() AS id;

-- name: next_due
-- Seconds until the first delayed message (retry_after in the future) becomes claimable, by the database's clock; NULL when none: how long an idle consumer may sleep.
-- kinds: reads
SELECT -(TIMESTAMPDIFF(MICROSECOND, MIN(`retry_after`), UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `shop_tasks`
WHERE `queue` = %(group)s
  AND `processed_at` IS NULL
  AND `retry_after` > UTC_TIMESTAMP(6);

-- name: claim
-- Lists up to scan ready rows (free or expired) without locking them; locks up to limit of those still ready by primary key (locked rows skipped) and reads the token, the server's clock plus lease_s; then writes the token to the rows it locked (ids: their ids as a JSON array), counting the attempt. One transaction.
-- kinds: reads reads writes
SELECT `id` AS id
FROM `shop_tasks`
WHERE `queue` = %(group)s
  AND `processed_at` IS NULL
  AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
  AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
  AND NOT EXISTS (
    SELECT 1
    FROM `shop_tasks_pause` AS qgen_paused
    WHERE qgen_paused.queue_table = 'shop_tasks'
      AND qgen_paused.queue_group IN ('', %(group)s)
  )
ORDER BY `priority` DESC, `id`
LIMIT %(scan)s;
SELECT `shop_tasks`.`id` AS id, `payload` AS payload, `attempt` AS attempt, `queue` AS `group`, UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS token
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id
WHERE `queue` = %(group)s
  AND `processed_at` IS NULL
  AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
  AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id
SET `shop_tasks`.`locked_until` = %(token)s, `shop_tasks`.`attempt` = `shop_tasks`.`attempt` + 1;

-- name: extend
-- Reads the new token (the server's clock plus lease_s), then moves the held lease to it (no row: the lease was lost).
-- kinds: reads writes
SELECT UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS new_token;
UPDATE `shop_tasks`
SET `locked_until` = %(new_token)s
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE `shop_tasks`
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack_result
-- Finishes the row as ack does (marks it processed) and keeps the handler's result (JSON) in result until the row is pruned.
-- kinds: writes
UPDATE `shop_tasks`
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL, `result` = %(result)s
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE `shop_tasks`
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: retry
-- Returns the row at once by clearing its lease (the claim already counted the attempt); records why in last_error.
-- kinds: writes
UPDATE `shop_tasks`
SET `locked_until` = NULL, `last_error` = %(error)s
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: retry_after
-- Returns the row delay_s seconds from now and clears its lease; records why in last_error.
-- kinds: writes
UPDATE `shop_tasks`
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, `locked_until` = NULL, `last_error` = %(error)s
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack_many
-- Finishes the rows of pairs (a JSON array of [id, token]) that still hold their token: marks them processed; the ids it finished (a pair missing lost its lease).
-- kinds: reads writes
SELECT `shop_tasks`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id AND `shop_tasks`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id AND `shop_tasks`.`locked_until` = j.qgen_token
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL;

-- name: drop_many
-- Finishes poison messages exactly as ack_many does: they leave the queue.
-- kinds: reads writes
SELECT `shop_tasks`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id AND `shop_tasks`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id AND `shop_tasks`.`locked_until` = j.qgen_token
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL;

-- name: retry_many
-- Returns the rows of pairs that still hold their token at once by clearing their lease; records why in last_error; the ids it returned.
-- kinds: reads writes
SELECT `shop_tasks`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id AND `shop_tasks`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id AND `shop_tasks`.`locked_until` = j.qgen_token
SET `locked_until` = NULL, `last_error` = %(error)s;

-- name: retry_after_many
-- Returns the rows of pairs that still hold their token delay_s seconds from now and clears their lease; records why in last_error; the ids it touched.
-- kinds: reads writes
SELECT `shop_tasks`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id AND `shop_tasks`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id AND `shop_tasks`.`locked_until` = j.qgen_token
SET `retry_after` = UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND, `locked_until` = NULL, `last_error` = %(error)s;

-- name: dead_letter_many
-- At the cap: sets the group of the rows of pairs that still hold their token to the dead-letter group and clears their lease; records why in last_error; the ids it moved.
-- kinds: reads writes
SELECT `shop_tasks`.`id` AS id
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id AND `shop_tasks`.`locked_until` = j.qgen_token
FOR UPDATE;
UPDATE JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$[0]', qgen_token DATETIME(6) PATH '$[1]')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id AND `shop_tasks`.`locked_until` = j.qgen_token
SET `queue` = %(dead_group)s, `locked_until` = NULL, `last_error` = %(error)s;

-- name: dead_letter
-- At the cap: sets the row's group to the dead-letter group, lease cleared; records why in last_error.
-- kinds: writes
UPDATE `shop_tasks`
SET `queue` = %(dead_group)s, `locked_until` = NULL, `last_error` = %(error)s
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
-- kinds: writes
UPDATE `shop_tasks`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared and the claim's count undone.
-- kinds: writes
UPDATE `shop_tasks`
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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now), delayed (retry_after in the future), in_flight (a lease in the future), dead (in the dead letter, counted up to count_limit rows), processed (kept rows marked processed, counted up to processed_limit rows), oldest_ready_s (seconds since the first ready row in id order was enqueued), last_error (why the newest unfinished row that failed failed) and dead_last_error (why the newest dead message died), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, qgen_live.qgen_delayed AS `delayed`, qgen_live.qgen_in_flight AS `in_flight`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS dead
    FROM `shop_tasks`
    WHERE `queue` = %(dead_group)s
      AND `processed_at` IS NULL
    LIMIT %(count_limit)s
  ) AS qgen_dead
) AS `dead`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM `shop_tasks`
    WHERE `queue` = %(group)s
      AND `processed_at` IS NOT NULL
    LIMIT %(processed_limit)s
  ) AS qgen_kept
) AS `processed`, (
  SELECT TIMESTAMPDIFF(MICROSECOND, `enqueued_at`, UTC_TIMESTAMP(6)) / 1000000.0
  FROM `shop_tasks`
  WHERE `queue` = %(group)s
    AND `processed_at` IS NULL
    AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
    AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
  ORDER BY `id`
  LIMIT 1
) AS `oldest_ready_s`, (
  SELECT `last_error`
  FROM `shop_tasks`
  WHERE `queue` = %(group)s
    AND `processed_at` IS NULL
    AND `last_error` IS NOT NULL
  ORDER BY `id` DESC
  LIMIT 1
) AS `last_error`, (
  SELECT `last_error`
  FROM `shop_tasks`
  WHERE `queue` = %(dead_group)s
    AND `processed_at` IS NULL
    AND `last_error` IS NOT NULL
  ORDER BY `id` DESC
  LIMIT 1
) AS `dead_last_error`, (
  SELECT COUNT(*)
  FROM `shop_tasks_pause`
  WHERE queue_table = 'shop_tasks'
    AND queue_group IN ('', %(group)s)
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COALESCE(SUM(CASE WHEN (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6)) AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6)) THEN 1 ELSE 0 END), 0) AS qgen_ready,
    COALESCE(SUM(CASE WHEN `retry_after` > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_delayed,
    COALESCE(SUM(CASE WHEN `locked_until` >= UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS qgen_in_flight
  FROM (
    SELECT `id`, `retry_after`, `locked_until`
    FROM `shop_tasks`
    WHERE `queue` = %(group)s
      AND `processed_at` IS NULL
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (dead: in the dead letter; done: marked processed; running: a lease in the future; pending otherwise), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or pruned.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, CASE WHEN `queue` = %(dead_group)s AND `processed_at` IS NULL THEN 'dead' WHEN `processed_at` IS NOT NULL THEN 'done' WHEN `locked_until` >= UTC_TIMESTAMP(6) THEN 'running' ELSE 'pending' END AS `state`, `attempt` - 1 AS attempts, `result` AS `result`, NULL AS `progress`, `last_error` AS last_error, `enqueued_at` AS enqueued_at, `processed_at` AS processed_at
FROM `shop_tasks`
WHERE `id` = %(id)s;

-- name: dead_list
-- Lists up to limit dead messages with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `queue` AS `group`, `enqueued_at` AS enqueued_at, `last_error` AS last_error
FROM `shop_tasks`
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: dead_list_newest
-- Lists up to limit dead messages with ids below after_id, newest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `queue` AS `group`, `enqueued_at` AS enqueued_at, `last_error` AS last_error
FROM `shop_tasks`
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL
  AND `id` < %(after_id)s
ORDER BY `id` DESC
LIMIT %(limit)s;

-- name: dead_show
-- Reads one dead message by id.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `queue` AS `group`, `enqueued_at` AS enqueued_at, `last_error` AS last_error
FROM `shop_tasks`
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL
  AND `id` = %(id)s;

-- name: redrive
-- Sends the dead messages ids (a JSON array) back to the live group (group) as first deliveries (attempt 1, no delay, no lease).
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id
SET `queue` = %(group)s, `attempt` = 1, `retry_after` = NULL, `locked_until` = NULL
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL;

-- name: redrive_all
-- Sends every dead message back as a first delivery, as redrive does.
-- kinds: writes
UPDATE `shop_tasks`
SET `queue` = %(group)s, `attempt` = 1, `retry_after` = NULL, `locked_until` = NULL
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL;

-- name: purge_dead
-- Deletes the dead messages ids (a JSON array) for good.
-- kinds: writes
DELETE `shop_tasks`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `shop_tasks` FORCE INDEX (PRIMARY) ON `shop_tasks`.`id` = j.qgen_id
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL;

-- name: purge_dead_all
-- Deletes every dead message for good.
-- kinds: writes
DELETE FROM `shop_tasks`
WHERE `queue` = %(dead_group)s
  AND `processed_at` IS NULL;

-- name: prune
-- Deletes up to batch rows marked processed more than age_s seconds ago (the database's clock); unprocessed rows stay. Run it until it deletes fewer than batch.
-- kinds: writes
DELETE FROM `shop_tasks`
WHERE `queue` = %(group)s
  AND `processed_at` < UTC_TIMESTAMP(6) - INTERVAL %(age_s)s SECOND
ORDER BY `processed_at`, `id`
LIMIT %(batch)s;

-- name: pause
-- Pauses shop_tasks for group ('': every group): no claim lists its rows until resume; a delivery in flight settles as usual. Pausing a paused scope keeps its first paused_at.
-- kinds: writes
INSERT IGNORE INTO `shop_tasks_pause` (queue_table, queue_group, paused_at)
VALUES ('shop_tasks', %(group)s, UTC_TIMESTAMP(6));

-- name: resume
-- Resumes shop_tasks for group ('': the pause of every group; a group paused on its own stays paused): the next claim lists its rows again.
-- kinds: writes
DELETE FROM `shop_tasks_pause`
WHERE queue_table = 'shop_tasks'
  AND queue_group = %(group)s;

-- name: paused
-- Lists the paused scopes of shop_tasks (`group` '': every group) and since when, by the database's clock.
-- kinds: reads
SELECT queue_group AS `group`, paused_at
FROM `shop_tasks_pause`
WHERE queue_table = 'shop_tasks'
ORDER BY queue_group;

-- name: groups
-- Counts the unfinished rows of each group of the table, for `qgen verify`: rows in a group no declared queue claims (a queue renamed, its group with it) wait forever.
-- kinds: reads
SELECT `queue` AS `group`, COUNT(*) AS pending
FROM `shop_tasks`
WHERE `processed_at` IS NULL
GROUP BY `queue`
ORDER BY `queue`;

-- name: group_names
-- Lists the groups of the table that hold unfinished rows, for the console's overview: one index probe per group, where groups counts every row.
-- kinds: reads
SELECT DISTINCT `queue` AS `group`
FROM `shop_tasks`
WHERE `processed_at` IS NULL
ORDER BY `queue`;

-- name: regroup
-- Moves the unfinished rows of group from_group to group (`qgen regroup`): rows a renamed queue left behind.
-- kinds: writes
UPDATE `shop_tasks`
SET `queue` = %(group)s
WHERE `queue` = %(from_group)s
  AND `processed_at` IS NULL;

-- name: pending_list
-- Lists up to limit pending messages of group (not finished, not dead: ready, delayed or in flight) with ids above after_id, oldest first; due_s is the seconds until a delayed one is claimable.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `queue` AS `group`, `enqueued_at` AS enqueued_at, `last_error` AS last_error, -(TIMESTAMPDIFF(MICROSECOND, `retry_after`, UTC_TIMESTAMP(6)) / 1000000.0) AS due_s
FROM `shop_tasks`
WHERE `queue` = %(group)s
  AND `processed_at` IS NULL
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: advance
-- Brings the delayed messages of group (retry_after in the future) by_s seconds nearer, as if that much time had passed: tests travel in time with it (runtime.testing) instead of sleeping.
-- kinds: writes
UPDATE `shop_tasks`
SET `retry_after` = `retry_after` - INTERVAL %(by_s)s SECOND
WHERE `queue` = %(group)s
  AND `processed_at` IS NULL
  AND `retry_after` > UTC_TIMESTAMP(6);

-- name: finished_per_minute
-- Counts the rows marked processed in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6)) AS minute, COUNT(*) AS n
FROM `shop_tasks`
WHERE `queue` = %(group)s
  AND `processed_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND
GROUP BY TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6))
ORDER BY minute;

-- name: enqueued_per_minute
-- Counts the rows enqueued in each minute of the last window_s seconds that the table still holds (unfinished, or processed in that window), for the console's chart.
-- kinds: reads
SELECT TIMESTAMPDIFF(MINUTE, `enqueued_at`, UTC_TIMESTAMP(6)) AS minute, COUNT(*) AS n
FROM `shop_tasks`
WHERE `queue` = %(group)s
  AND (`processed_at` IS NULL OR `processed_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND)
  AND `enqueued_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND
GROUP BY TIMESTAMPDIFF(MINUTE, `enqueued_at`, UTC_TIMESTAMP(6))
ORDER BY minute;

-- name: ready_by_priority
-- Counts the ready rows (claimable now) of each priority, highest first, for the console's queue page.
-- kinds: reads
SELECT `priority` AS `priority`, COUNT(*) AS ready
FROM `shop_tasks`
WHERE `queue` = %(group)s
  AND `processed_at` IS NULL
  AND (`retry_after` IS NULL OR `retry_after` <= UTC_TIMESTAMP(6))
  AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
GROUP BY `priority`
ORDER BY `priority` DESC;

-- name: cancel
-- Finishes message id as ack does (marks it processed) if it is pending and not in flight (a lease in the future); no row changed: in flight, already finished, dead, or no such id.
-- kinds: writes
UPDATE `shop_tasks`
SET `processed_at` = UTC_TIMESTAMP(6), `locked_until` = NULL
WHERE `id` = %(id)s AND `processed_at` IS NULL AND `queue` <> %(dead_group)s AND (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6));
