"""The console's write guard: one operator token, a signed session cookie for the browser, a
CSRF token per session for its forms, and the response headers every answer carries."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

from runtime.contract.errors import ConfigurationError

#: the environment variable holding the token (``--token-file`` reads it from a file instead)
TOKEN_ENV = "QGEN_CONSOLE_TOKEN"
COOKIE = "qgen_console"
#: how long a browser login lasts
SESSION_S = 12 * 3600
#: a token shorter than this is refused: it could be guessed
MIN_TOKEN = 16

#: scripts none, styles and images from the console itself, forms only to itself, no frames
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def read_token(token_file: str | Path | None = None) -> str | None:
    """The operator token: the file's first line when ``token_file`` is given, else the
    QGEN_CONSOLE_TOKEN variable; None when neither is set. Refuses a token shorter than
    MIN_TOKEN characters."""
    if token_file is not None:
        try:
            text = Path(token_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the token file {str(token_file)!r}: {exc.strerror or exc}"
            ) from None
        token = text.strip().splitlines()[0].strip() if text.strip() else ""
        where = f"the token file {str(token_file)!r}"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        where = TOKEN_ENV
        if not token:
            return None
    if len(token) < MIN_TOKEN:
        raise ConfigurationError(
            f"{where} holds a token of {len(token)} characters: use at least {MIN_TOKEN} "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    return token


class Guard:
    """Checks the token, and issues and checks the browser's session cookie and CSRF token.

    A session is ``<expiry>.<nonce>.<mac>``, signed with a key derived from the token: a new
    token ends every session. The CSRF token of a session is another MAC of its nonce.
    """

    def __init__(self, token: str | None) -> None:
        self.token = token
        self._key = hashlib.sha256(b"qgen-console:" + token.encode()).digest() if token else b""

    def _mac(self, purpose: str, text: str) -> str:
        return hmac.new(self._key, f"{purpose}:{text}".encode(), hashlib.sha256).hexdigest()

    def token_ok(self, given: str | None) -> bool:
        if not self.token or not given:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    def bearer_ok(self, authorization: str | None) -> bool:
        scheme, _, value = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(value.strip())

    def new_session(self) -> str:
        body = f"{int(time.time()) + SESSION_S}.{secrets.token_hex(16)}"
        return f"{body}.{self._mac('session', body)}"

    def session_nonce(self, cookie: str | None) -> str | None:
        """The nonce of a valid, unexpired session cookie, else None."""
        if not self.token or not cookie or cookie.count(".") != 2:
            return None
        expiry, nonce, mac = cookie.split(".")
        body = f"{expiry}.{nonce}"
        if not hmac.compare_digest(mac, self._mac("session", body)):
            return None
        if not expiry.isdigit() or int(expiry) < time.time():
            return None
        return nonce

    def csrf_for(self, nonce: str) -> str:
        return self._mac("csrf", nonce)

    def csrf_ok(self, nonce: str, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(str(given), self.csrf_for(nonce))
