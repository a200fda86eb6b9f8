-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: "audit"
-- dialect: "mariadb"
-- form: "row_lock"
-- table: "audit_queue"
-- columns: {"id": "id", "payload": "entry"}
-- max_attempts: null
-- dead_letter: null
-- seal: sha256:74d4460358f33f3db1c8ffcc7e1fd4248810af1bf6023d98c1e5e1774b44ce34

-- name: schema
-- Creates the queue table, if missing.
-- kinds: writes
CREATE TABLE IF NOT EXISTS `audit_queue` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `entry` JSON NOT NULL
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message.
-- kinds: writes
INSERT INTO `audit_queue` (`entry`)
VALUES (%(payload)s);

-- name: claim
-- Lists up to scan ready rows without locking them, then locks up to limit of those still ready by primary key until the transaction ends (ids: the listed ids as a JSON array); locked rows are skipped.
-- kinds: reads reads
SELECT `id` AS id
FROM `audit_queue`
ORDER BY `id`
LIMIT %(scan)s;
SELECT `audit_queue`.`id` AS id, `entry` AS payload
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `audit_queue` FORCE INDEX (PRIMARY) ON `audit_queue`.`id` = j.qgen_id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: ack
-- Finishes the row: deletes it.
-- kinds: writes
DELETE FROM `audit_queue`
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
-- kinds: writes
DELETE FROM `audit_queue`
WHERE `id` = %(id)s;
