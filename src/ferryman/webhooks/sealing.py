"""Signing secrets at rest: sealed with Fernet under FERRYMAN_SECRET_KEY when the
operator sets one, kept as they are otherwise.

A signing secret cannot be stored as a hash, as an API key is: ferryman must read it
back to sign. So a copy of the database is a copy of every tenant's secret unless the
secrets are sealed under a key that lives elsewhere (the environment, a secret store).

Each stored value says how it was stored: ``fernet:<token>`` or ``plain:<secret>``.
A process with a key still opens ``plain:`` values written before the key was set, so
setting a key needs no migration; a rotation is a new key put first in the list, the
old ones kept after it until every secret has been sealed again.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from ferryman.core.errors import WebhookSecretUnreadableError

if TYPE_CHECKING:
    from ferryman.ports.webhooks import SecretSealer

SECRET_KEY_VARIABLE = "FERRYMAN_SECRET_KEY"
FERNET = "fernet:"
PLAIN = "plain:"
MAKE_A_KEY = (
    'python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
)
# What a ferryman API key looks like (services/access.py, which this package may not
# import): recognised only to tell an operator who pasted one here by mistake.
_API_KEY = re.compile(r"fm_[0-9a-f]{12}_")


class PlainSealer:
    """Keeps secrets as they are (no FERRYMAN_SECRET_KEY): the database must be
    protected as the secrets themselves would be."""

    def seal(self, secret: str) -> str:
        return PLAIN + secret

    def open(self, sealed: str) -> str:
        if sealed.startswith(PLAIN):
            return sealed.removeprefix(PLAIN)
        raise WebhookSecretUnreadableError()


class FernetSealer:
    """Seals with the first key and opens with any of them (MultiFernet)."""

    def __init__(self, keys: list[Fernet]) -> None:
        self._fernet = MultiFernet(keys)

    def seal(self, secret: str) -> str:
        return FERNET + self._fernet.encrypt(secret.encode("utf-8")).decode("ascii")

    def open(self, sealed: str) -> str:
        if sealed.startswith(PLAIN):
            return sealed.removeprefix(PLAIN)
        if not sealed.startswith(FERNET):
            raise WebhookSecretUnreadableError()
        try:
            return self._fernet.decrypt(sealed.removeprefix(FERNET)).decode("utf-8")
        except (InvalidToken, UnicodeDecodeError):
            raise WebhookSecretUnreadableError() from None


def sealer_from_key(value: str | None) -> SecretSealer:
    """The sealer for FERRYMAN_SECRET_KEY's value: one or more Fernet keys separated by
    commas (the first seals, all open), or None / blank for no sealing.

    Raises:
        ValueError: a key is not a Fernet key. The message names the variable and how
            to make a key, never the value (it may be a secret pasted in by mistake).
    """
    if value is None or not value.strip():
        return PlainSealer()
    parts = [part.strip() for part in value.split(",") if part.strip()]
    keys: list[Fernet] = []
    for number, part in enumerate(parts, start=1):
        try:
            keys.append(Fernet(part))
        except (ValueError, TypeError):
            # No chaining: the cause could quote the value.
            raise ValueError(_malformed(part, number, len(parts))) from None
    return FernetSealer(keys)


def _malformed(part: str, number: int, count: int) -> str:
    which = "its value" if count == 1 else f"key {number} of {count}"
    message = f"{SECRET_KEY_VARIABLE}: {which} is not a Fernet key (32 url-safe base64 bytes)"
    if part.startswith("whsec_"):
        message += (
            "; it looks like a webhook signing secret (whsec_...), not a key: rotate that"
            " secret, as it has been in the environment"
        )
    elif _API_KEY.match(part):
        message += (
            "; it looks like a ferryman API key, not a key: revoke that API key, as it has"
            " been in the environment"
        )
    return f"{message}. Make a key with: {MAKE_A_KEY}"
