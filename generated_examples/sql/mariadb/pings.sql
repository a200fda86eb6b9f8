-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: pings
-- dialect: mariadb
-- form: lease
-- table: pings
-- columns: id=ping_id payload=data locked_until=leased_until
-- max_attempts: none
-- dead_letter: none
-- lease_s: 10

-- name: schema
-- Creates the queue table, if missing.
CREATE TABLE IF NOT EXISTS `pings` (
  `ping_id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `data` JSON NOT NULL,
  `leased_until` DATETIME(6) NULL
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message.
INSERT INTO `pings` (`data`)
VALUES (%(payload)s);

-- name: claim
-- Lists up to scan ready rows (free or expired) without locking them; locks up to limit of those still ready by primary key (locked rows skipped) and reads the token, the server's clock plus lease_s; then writes the token to the rows it locked (ids: their ids as a JSON array). One transaction.
SELECT `ping_id` AS id
FROM `pings`
WHERE (`leased_until` IS NULL OR `leased_until` < UTC_TIMESTAMP(6))
ORDER BY `ping_id`
LIMIT %(scan)s;
SELECT `pings`.`ping_id` AS id, `data` AS payload, UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS token
FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `pings` FORCE INDEX (PRIMARY) ON `pings`.`ping_id` = j.qgen_id
WHERE (`leased_until` IS NULL OR `leased_until` < UTC_TIMESTAMP(6))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(%(ids)s, '$[*]' COLUMNS (qgen_id BIGINT PATH '$')) AS j
STRAIGHT_JOIN `pings` FORCE INDEX (PRIMARY) ON `pings`.`ping_id` = j.qgen_id
SET `pings`.`leased_until` = %(token)s;

-- name: extend
-- Reads the new token (the server's clock plus lease_s), then moves the held lease to it (no row: the lease was lost).
SELECT UTC_TIMESTAMP(6) + INTERVAL %(lease_s)s SECOND AS new_token;
UPDATE `pings`
SET `leased_until` = %(new_token)s
WHERE `ping_id` = %(id)s AND `leased_until` = %(token)s;

-- name: ack
-- Finishes the row: deletes it.
DELETE FROM `pings`
WHERE `ping_id` = %(id)s AND `leased_until` = %(token)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
DELETE FROM `pings`
WHERE `ping_id` = %(id)s AND `leased_until` = %(token)s;

-- name: retry
-- Returns the row at once by clearing its lease.
UPDATE `pings`
SET `leased_until` = NULL
WHERE `ping_id` = %(id)s AND `leased_until` = %(token)s;

-- name: release
-- Gives back a delivery dropped unsettled: the lease is cleared at once.
UPDATE `pings`
SET `leased_until` = NULL
WHERE `ping_id` = %(id)s AND `leased_until` = %(token)s;

-- name: unclaim
-- Gives back a claimed row whose handler never started (the consumer stopped or lost its connection): the lease is cleared.
UPDATE `pings`
SET `leased_until` = NULL
WHERE `ping_id` = %(id)s AND `leased_until` = %(token)s;
