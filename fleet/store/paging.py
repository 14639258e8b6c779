"""Continue tokens: where the next page of a list starts, opaque to clients.

Theory of operation: a token is ``kind:N`` (the list's kind and the last id
of the page shown) in unpadded URL-safe base64.  :func:`decode` reads a token
strictly, or raises :class:`BadContinueToken`: base64 of the URL-safe
alphabet only (no character skipped), UTF-8, the list's own kind, and ``N``
read by :func:`fleet.core.digits.parse_digits` (ASCII digits, at most 18 of
them), so no token a client makes up reads as another number or fails later.
"""

from __future__ import annotations

import base64
import binascii

from fleet.core.digits import parse_digits


class BadContinueToken(ValueError):
    """A ``continue`` token this service did not hand out."""


def encode(kind: str, last_id: int) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{last_id}".encode()).decode().rstrip("=")


def decode(kind: str, token: str) -> int:
    """The last id of the page before the one ``token`` asks for."""
    try:
        padded = (token + "=" * (-len(token) % 4)).encode("ascii")
        raw = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeError, ValueError) as e:
        raise BadContinueToken("continue token is not valid") from e
    found, _, number = raw.partition(":")
    last_id = parse_digits(number)
    if found != kind or last_id is None:
        raise BadContinueToken("continue token is not valid")
    return last_id
