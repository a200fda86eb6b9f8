-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- outbox: "outbox"
-- dialect: "mariadb"
-- table: "outbox"
-- columns: {"id": "id", "payload": "payload", "topic": "topic", "key": "partition_key", "created_at": "created_at", "processed_at": "processed_at"}
-- seal: sha256:1da9223adf3cf8e45bde801fa9b50e05814fe6a7f77e3e0837f0a747f5df2016

-- name: schema
-- Creates the outbox table and the index the relay's fetch reads, if missing.
-- kinds: writes
CREATE TABLE IF NOT EXISTS `outbox` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `topic` VARCHAR(191) NULL,
  `partition_key` VARCHAR(191) NULL,
  `created_at` DATETIME(6) NOT NULL,
  `processed_at` DATETIME(6) NULL,
  INDEX `outbox_claim` (`processed_at`, `id`)
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
