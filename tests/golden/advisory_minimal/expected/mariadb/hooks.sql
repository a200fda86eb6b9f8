-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
-- queue: hooks
-- dialect: mariadb
-- form: advisory
-- table: hooks
-- columns: id=id payload=payload
-- max_attempts: none
-- dead_letter: none

-- name: schema
-- Creates the queue table, if missing.
CREATE TABLE IF NOT EXISTS `hooks` (
  `id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `payload` JSON NOT NULL
) ENGINE = InnoDB;

-- name: enqueue
-- Adds one message.
INSERT INTO `hooks` (`payload`)
VALUES (%(payload)s);

-- name: claim
-- Lists up to limit ready rows as candidates; nothing is held until lock succeeds.
SELECT `id` AS id
FROM `hooks`
ORDER BY `id`
LIMIT %(limit)s;

-- name: lock
-- Tries the row's named lock without waiting; 1 means this session holds it until unlock.
SELECT GET_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.hooks'), 256), 24), ':', %(id)s), 0) AS locked;

-- name: take
-- Under the key: reads the row if it is still claimable (no row: skip it and unlock).
SELECT `id` AS id, `payload` AS payload
FROM `hooks`
WHERE `id` = %(id)s;

-- name: ack
-- Finishes the row: deletes it.
DELETE FROM `hooks`
WHERE `id` = %(id)s;

-- name: drop
-- Finishes a poison message exactly as ack does: it leaves the queue.
DELETE FROM `hooks`
WHERE `id` = %(id)s;

-- name: unlock
-- Releases the row's named lock held by this session.
SELECT RELEASE_LOCK(CONCAT('qgen:', LEFT(SHA2(CONCAT(DATABASE(), '.hooks'), 256), 24), ':', %(id)s)) AS unlocked;
