-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: leased
-- dialect: mariadb
-- form: lease
-- table: leased
-- columns: id=id payload=payload locked_until=locked_until
-- max_attempts: none
-- dead_letter: none
-- lease_s: 30

-- name: schema
-- Creates the queue table, if missing.
CREATE TABLE IF NOT EXISTS `leased` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL,
  `locked_until` DATETIME(6) NULL
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message.
INSERT INTO `leased` (`payload`)
VALUES (%(payload)s);

-- name: claim
-- Lists up to scan ready rows (free or expired) without locking them; locks up to limit of those still ready by primary key (locked rows skipped) and reads the token, the server's clock plus lease_s; then writes the token to the rows it locked (ids: their ids as a JSON array). One transaction.
SELECT `id` AS id
FROM `leased`
WHERE (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
ORDER BY `id`
LIMIT %(scan)s;
SELECT `leased`.`id` AS id, `payload` AS payload, UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS token
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `leased` FORCE INDEX (PRIMARY) ON `leased`.`id` = j.qgen_id
WHERE (`locked_until` IS NULL OR `locked_until` < UTC_TIMESTAMP(6))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `leased` FORCE INDEX (PRIMARY) ON `leased`.`id` = j.qgen_id
SET `leased`.`locked_until` = %(token)s;

-- name: extend
-- Reads the new token (the server's clock plus lease_s), then moves the held lease to it (no row: the lease was lost).
SELECT UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS new_token;
UPDATE `leased`
SET `locked_until` = %(new_token)s
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: ack
-- Finishes the row: deletes it.
DELETE FROM `leased`
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
DELETE FROM `leased`
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: retry
-- Returns the row at once by clearing its lease.
UPDATE `leased`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
UPDATE `leased`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared.
UPDATE `leased`
SET `locked_until` = NULL
WHERE `id` = %(id)s AND `locked_until` = %(token)s;
