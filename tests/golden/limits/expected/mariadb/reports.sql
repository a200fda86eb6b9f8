-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "reports"
-- dialect: "mariadb"
-- form: "row_lock"
-- table: "reports_queue"
-- columns: {"id": "id", "payload": "payload", "group": "queue", "attempt": "attempt"}
-- max_attempts: null
-- dead_letter: null
-- default_group: "reports"
-- pause_table: "reports_queue_pause"
-- seal: sha256:d7d079bbd1139f17f054f8884acc9527d0fdfb5e09d3dbe6279cbca331c2a88b

-- name: schema
-- Creates the queue table, the table of paused scopes and the index the claim reads, if missing; the table `reports_queue_limits` of its in-flight slots.
-- kinds: writes writes writes
CREATE TABLE IF NOT EXISTS `reports_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `queue` VARCHAR(191) NOT NULL,
  `attempt` INT NOT NULL DEFAULT 1,
  INDEX `reports_queue_claim` (`queue`, `id`)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `reports_queue_pause` (
  queue_table VARCHAR(191) NOT NULL,
  queue_group VARCHAR(191) NOT NULL,
  paused_at DATETIME(6) NULL,
  PRIMARY KEY (queue_table, queue_group)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `reports_queue_limits` (
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
INSERT INTO `reports_queue` (`payload`, `queue`)
VALUES (%(payload)s, %(group)s);
SELECT LAST_INSERT_ID() AS id;

-- name: claim
-- Lists up to scan ready rows without locking them, then locks up to limit of those still ready by primary key until the transaction ends (ids: the listed ids as a JSON array); locked rows are skipped; at most 4 in flight: it first locks up to limit of the 4 slot rows of `reports_queue_limits` (locked ones skipped) and claims as many rows as it locked (none: no row); they stay locked with its rows until its transaction ends.
-- kinds: reads reads reads
SELECT COUNT(*) AS `limit`
FROM (
  SELECT `slot`
  FROM `reports_queue_limits`
  WHERE `bucket` = %(group)s
    AND `slot` BETWEEN 1 AND 4
  ORDER BY `slot`
  LIMIT %(limit)s
  FOR UPDATE SKIP LOCKED
) AS qgen_slots
HAVING COUNT(*) > 0;
SELECT `id` AS id
FROM `reports_queue`
WHERE `queue` = %(group)s
  AND NOT EXISTS (
    SELECT 1
    FROM `reports_queue_pause` AS qgen_paused
    WHERE qgen_paused.queue_table = 'reports_queue'
      AND qgen_paused.queue_group IN ('', %(group)s)
  )
ORDER BY `id`
LIMIT %(scan)s;
SELECT `reports_queue`.`id` AS id, `payload` AS payload, `attempt` AS attempt, `queue` AS `group`
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
WHERE `queue` = %(group)s
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: limit_slots
-- In a transaction of its own, before a consumer's first claim: creates the 4 slot rows of the bucket in `reports_queue_limits` the claim locks, those missing (made in the claim's transaction, they would wait for its batch).
-- kinds: writes
INSERT IGNORE INTO `reports_queue_limits` (`bucket`, `slot`)
WITH RECURSIVE qgen_n (n) AS (
  SELECT 1
  UNION ALL
  SELECT n + 1 FROM qgen_n WHERE n < 4
)
SELECT %(group)s, n
FROM qgen_n
WHERE NOT EXISTS (
  SELECT 1
  FROM `reports_queue_limits`
  WHERE `bucket` = %(group)s
    AND `slot` = 4
);

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
-- Returns the row at once, counting the attempt (without an attempt column the runtime rolls back instead).
-- kinds: writes
UPDATE `reports_queue`
SET `attempt` = `attempt` + 1
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
-- In the claim's transaction: returns the rows ids at once, counting their attempt.
-- kinds: writes
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `reports_queue` FORCE INDEX (PRIMARY) ON `reports_queue`.`id` = j.qgen_id
SET `attempt` = `attempt` + 1;

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
-- Counts the queue's rows by the database's clock over its oldest count_limit unfinished rows in id order (pending: how many were read; as many as count_limit: there may be more, and ready, delayed and in_flight count only those): ready (claimable now, including rows a consumer holds: row lock holds are invisible to SQL), delayed (retry_after in the future), in_flight (NULL: not visible to SQL in this form), dead (NULL: no dead letter), processed (NULL: finished rows are deleted), oldest_ready_s (NULL: no enqueued_at column), paused (how many pauses hold it: the queue's or the group's; its ready rows wait).
-- kinds: reads
SELECT qgen_live.qgen_pending AS pending, qgen_live.qgen_ready AS `ready`, 0 AS `delayed`, NULL AS `in_flight`, NULL AS `dead`, NULL AS `processed`, NULL AS `oldest_ready_s`, (
  SELECT COUNT(*)
  FROM `reports_queue_pause`
  WHERE queue_table = 'reports_queue'
    AND queue_group IN ('', %(group)s)
) AS paused
FROM (
  SELECT COUNT(*) AS qgen_pending, COUNT(*) AS qgen_ready
  FROM (
    SELECT `id`
    FROM `reports_queue`
    WHERE `queue` = %(group)s
    ORDER BY `id`
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_live;

-- name: status
-- Reads message id by the database's clock: its state (pending otherwise, also while a consumer holds it: row lock holds are invisible to SQL), how many deliveries it had, and its payload, result, progress, last_error, enqueued_at and processed_at (NULL where the table has no such column); no row: unknown or finished (deleted).
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, 'pending' AS `state`, `attempt` - 1 AS attempts, NULL AS `result`, NULL AS `progress`, NULL AS last_error, NULL AS enqueued_at, NULL AS processed_at
FROM `reports_queue`
WHERE `id` = %(id)s;

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
SELECT `queue` AS `group`, COUNT(*) AS pending
FROM `reports_queue`
GROUP BY `queue`
ORDER BY `queue`;

-- name: group_names
-- Lists the groups of the table that hold unfinished rows, for the console's overview: one index probe per group, where groups counts every row.
-- kinds: reads
SELECT DISTINCT `queue` AS `group`
FROM `reports_queue`
ORDER BY `queue`;

-- name: regroup
-- Moves the unfinished rows of group from_group to group (`qgen regroup`): rows a renamed queue left behind.
-- kinds: writes
UPDATE `reports_queue`
SET `queue` = %(group)s
WHERE `queue` = %(from_group)s;

-- name: pending_list
-- Lists up to limit pending messages of group (not finished: ready, delayed or in flight) with ids above after_id, oldest first.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `attempt` AS attempt, `queue` AS `group`
FROM `reports_queue`
WHERE `queue` = %(group)s
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s;

-- name: cancel
-- Finishes message id as ack does (deletes it) if it is pending and not in flight (a claim's transaction holds the row: SKIP LOCKED passes it by); no row changed: in flight, already finished, dead, or no such id.
-- kinds: reads writes
SELECT `id` AS id
FROM `reports_queue`
WHERE `id` = %(id)s
FOR UPDATE SKIP LOCKED;
DELETE FROM `reports_queue`
WHERE `id` = %(id)s;
