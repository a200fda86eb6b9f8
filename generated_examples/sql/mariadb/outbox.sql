-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- outbox: "outbox"
-- dialect: "mariadb"
-- table: "outbox"
-- columns: {"id": "id", "payload": "payload", "topic": "topic", "key": "partition_key", "created_at": "created_at", "processed_at": "processed_at"}
-- seal: sha256:0aafac698132c30bf7e487cb36d1788ecdecd48b467c81302c9ce83adea9847c

-- name: schema
-- Creates the outbox table and the indexes the relay's fetch, prune and the console's counts read, if missing.
-- kinds: writes
CREATE TABLE IF NOT EXISTS `outbox` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `topic` VARCHAR(191) NULL,
  `partition_key` VARCHAR(191) NULL,
  `created_at` DATETIME(6) NOT NULL,
  `processed_at` DATETIME(6) NULL,
  INDEX `outbox_claim` (`processed_at`, `id`, `created_at`)
) ENGINE = InnoDB;

-- name: put
-- Adds one record in the caller's transaction, stamped with the database's clock.
-- kinds: writes reads
INSERT INTO `outbox` (`payload`, `topic`, `partition_key`, `created_at`)
VALUES (%(payload)s, %(topic)s, %(record_key)s, UTC_TIMESTAMP(6));
SELECT LAST_INSERT_ID() AS id;

-- name: fetch
-- Selects up to limit unmarked records after after_id, in id order, and holds them until the relay's COMMIT; records another relay holds are skipped.
-- kinds: reads
SELECT `id` AS id, `payload` AS payload, `topic` AS `topic`, `partition_key` AS `key`, `created_at` AS `created_at`
FROM `outbox`
WHERE `processed_at` IS NULL
  AND `id` > %(after_id)s
ORDER BY `id`
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: mark
-- Marks a handed record processed (ack and drop): it is never fetched again.
-- kinds: writes
UPDATE `outbox`
SET `processed_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s
  AND `processed_at` IS NULL;

-- name: prune
-- Deletes the records marked more than age_s seconds ago, by the database's clock; unmarked ones stay.
-- kinds: writes
DELETE FROM `outbox`
WHERE `processed_at` < UTC_TIMESTAMP(6) - INTERVAL %(age_s)s SECOND;

-- name: stats
-- Counts the records by the database's clock, in the keys a queue's stats reads: ready (unmarked, counted up to count_limit rows; pending: the same count), delayed (0), in_flight and dead (NULL: a relay's hold is its transaction's, and an outbox has no dead letter), processed (marked, kept until prune; counted up to processed_limit rows), oldest_ready_s (seconds since the first unmarked record was created).
-- kinds: reads
SELECT qgen_unmarked.qgen_pending AS pending, qgen_unmarked.qgen_pending AS `ready`, 0 AS `delayed`, NULL AS `in_flight`, NULL AS `dead`, (
  SELECT COUNT(*)
  FROM (
    SELECT 1 AS kept
    FROM `outbox`
    WHERE `processed_at` IS NOT NULL
    LIMIT %(processed_limit)s
  ) AS qgen_kept
) AS `processed`, (
  SELECT TIMESTAMPDIFF(MICROSECOND, `created_at`, UTC_TIMESTAMP(6)) / 1000000.0
  FROM `outbox`
  WHERE `processed_at` IS NULL
  ORDER BY `id`
  LIMIT 1
) AS `oldest_ready_s`
FROM (
  SELECT COUNT(*) AS qgen_pending
  FROM (
    SELECT 1 AS unmarked
    FROM `outbox`
    WHERE `processed_at` IS NULL
    LIMIT %(count_limit)s
  ) AS qgen_head
) AS qgen_unmarked;

-- name: finished_per_minute
-- Counts the records marked in each minute of the last window_s seconds (minute: whole minutes ago, by the database's clock), for the console's chart.
-- kinds: reads
SELECT TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6)) AS minute, COUNT(*) AS n
FROM `outbox`
WHERE `processed_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND
GROUP BY TIMESTAMPDIFF(MINUTE, `processed_at`, UTC_TIMESTAMP(6))
ORDER BY minute;

-- name: enqueued_per_minute
-- Counts the records created in each minute of the last window_s seconds that the table still holds (unmarked, or marked in that window), for the console's chart.
-- kinds: reads
SELECT TIMESTAMPDIFF(MINUTE, `created_at`, UTC_TIMESTAMP(6)) AS minute, COUNT(*) AS n
FROM `outbox`
WHERE (`processed_at` IS NULL OR `processed_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND)
  AND `created_at` >= UTC_TIMESTAMP(6) - INTERVAL %(window_s)s SECOND
GROUP BY TIMESTAMPDIFF(MINUTE, `created_at`, UTC_TIMESTAMP(6))
ORDER BY minute;

-- name: columns
-- Reads how the database describes a table's columns (table_name, in table_schema or the connection's own): for `qgen apply`.
-- kinds: reads
SELECT COLUMN_NAME AS name, COLUMN_TYPE AS type, IS_NULLABLE = 'YES' AS nullable, COLUMN_DEFAULT AS `default`, EXTRA LIKE '%%auto_increment%%' AS `generated`
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(%(table_schema)s, DATABASE()) AND TABLE_NAME = %(table_name)s
ORDER BY ORDINAL_POSITION;

-- name: indexes
-- Reads a table's indexes and their columns in order, for `qgen apply`.
-- kinds: reads
SELECT INDEX_NAME AS name, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX SEPARATOR ',') AS columns, 0 AS partial
FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = COALESCE(%(table_schema)s, DATABASE()) AND TABLE_NAME = %(table_name)s
GROUP BY INDEX_NAME
ORDER BY INDEX_NAME;

-- name: custom.expire
-- The service's own event 'expire', run in place of the outcome's own statement.
-- kinds: writes
UPDATE outbox SET topic = 'expired', processed_at = UTC_TIMESTAMP(6) WHERE id = %(id)s;
