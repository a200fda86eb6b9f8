"""The runtime's error types: every failure a service may catch is a BrokerError."""

from __future__ import annotations


class BrokerError(Exception):
    """Base of every error the runtime raises on purpose."""


class LeaseLost(BrokerError):
    """A lease settlement found another token: the row belongs to the claim that took it since."""


class ServerTooOld(BrokerError):
    """The server is older than the dialect's floor (named with the version found)."""


class DialectMismatch(BrokerError):
    """A rendered file was used on a database of another dialect."""


class RenderedFileError(BrokerError):
    """A rendered file could not be read: missing, hand-edited or from another format."""


class ConnectionLost(BrokerError):
    """The connection to the database dropped; nothing was settled on it after the drop."""


class UnknownCustomEvent(BrokerError):
    """A handler returned custom(name) for an event the rendered file does not declare."""


class ConfigurationError(BrokerError):
    """A URL, driver or argument the runtime cannot use (names what is wrong and the fix)."""


class InvalidArgument(ConfigurationError, ValueError):
    """An argument out of its range (a delay, a batch size, a page limit, message ids); a
    ValueError too, so code that catches ValueError keeps working."""


class PayloadError(BrokerError):
    """A payload that cannot be stored the same way on every engine (refused at enqueue, nothing
    written), or a stored payload that cannot be decoded (its message goes to the dead letter)."""


class DatabaseError(BrokerError):
    """The database refused a statement (a lock wait, a constraint, SQLite busy past its
    timeout…); the driver's own exception is kept as ``__cause__``. ``deadlock``: the server
    rolled this transaction back whole because another one conflicted with it (a deadlock's
    victim, a Galera node's certification conflict, a serialization failure): a race, which
    the same statements may win when run again."""

    deadlock: bool = False


class RedriveRefused(BrokerError):
    """A redrive would send back a message whose dedupe_key a pending message holds (or two
    dead messages of one key): nothing was sent back; ``ids`` are the refused ones."""

    def __init__(self, message: str, ids: list[int]) -> None:
        super().__init__(message)
        self.ids = ids
