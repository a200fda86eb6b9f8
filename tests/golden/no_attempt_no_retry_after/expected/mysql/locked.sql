-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "locked"
-- dialect: "mysql"
-- form: "row_lock"
-- table: "locked"
-- columns: {"id": "id", "payload": "payload", "processed_at": "done_at"}
-- max_attempts: null
-- dead_letter: null
-- seal: sha256:6ea7151e6c7b4f6b3e875f407679cd42ef71f3e6dd4f4b43105c03521fb80e88

-- name: schema
-- Creates the queue table and the index the claim reads, if missing.
-- kinds: writes
CREATE TABLE IF NOT EXISTS `locked` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `done_at` DATETIME(6) NULL,
  INDEX `locked_claim` (`done_at`, `id`)
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message.
-- kinds: writes
INSERT INTO `locked` (`payload`)
VALUES (%(payload)s);

-- name: claim
-- Lists up to scan ready rows without locking them, then locks up to limit of those still ready by primary key until the transaction ends (ids: the listed ids as a JSON array); locked rows are skipped.
-- kinds: reads reads
SELECT `id` AS id
FROM `locked`
WHERE `done_at` IS NULL
ORDER BY `id`
LIMIT %(scan)s;
SELECT `locked`.`id` AS id, `payload` AS payload
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `locked` FORCE INDEX (PRIMARY) ON `locked`.`id` = j.qgen_id
WHERE `done_at` IS NULL
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: ack
-- Finishes the row: marks it processed.
-- kinds: writes
UPDATE `locked`
SET `done_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
UPDATE `locked`
SET `done_at` = UTC_TIMESTAMP(6)
WHERE `id` = %(id)s;
