"""A caller's identity, signed by a follower for the leader (PostgreSQL replicas).

Theory of operation: a follower that forwards one of the leader's routes
(:mod:`fleet.api.leader_proxy`) has authenticated the caller itself; it
sends the leader no bearer token (the address it forwards to is whatever
the lease row says, and whoever could write that row would collect tokens)
but :data:`HEADER`: a statement "caller NAME, role ROLE, queues QUEUES,
asks METHOD TARGET with a body of this SHA-256, until EXPIRES, of the
replica leading in TERM at ADDRESS", signed with HMAC-SHA256 under
``replica_secret``, a key the replicas share.  The leader
(:func:`verify`, from :mod:`fleet.api.auth`) compares the signature in
constant time, then requires the statement to be unexpired (and not
further ahead than :data:`LIFETIME` allows), its method, target (path and
query) and body hash to be those of the request, and its term and address
to be its own; each signature is accepted once (:class:`Verifier` keeps
those it saw until they expire).  The caller it names is then the
request's caller: the leader checks its role and queues and audits the
request as for a token, so a team's request stays a team's.  Wall clocks
are compared: replicas are expected to agree within a few seconds (NTP),
which :data:`LIFETIME` allows for.

The statement is ``base64url(JSON) "." base64url(HMAC of the first part)``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Callable
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleet.api.tokens import Caller

#: Operations that need the scheduler's own state, or change it: a follower forwards them
#: to the leader (:mod:`fleet.api.leader_proxy`), and only for them does the leader take a
#: signed identity.
LEADER_OPERATIONS: Final = frozenset(
    {
        "getJob",
        "listQueues",
        "getQueue",
        "getQuotaTree",
        "replaceQuotaTree",
        "patchQuotaNode",
        "simulateQuotaTree",
        "listClusters",
        "putCluster",
        "deleteCluster",
        "setNodeHealth",
        "getClusterCells",
        "watchViews",
    }
)
#: The request header that carries the signed identity.
HEADER: Final = "X-Fleet-Caller"
#: Seconds a signed identity is valid for, from its signing.
LIFETIME: Final = 10.0
#: Longest header accepted (a bigger one is refused unread).
MAX_LENGTH: Final = 16_384


class Refused(Exception):
    """A signed identity that is not accepted; the message says why.

    ``stale``: it was signed for another term or leader (the follower's view
    of the lease is behind: worth a retry), not forged or expired.
    """

    def __init__(self, message: str, *, stale: bool = False) -> None:
        super().__init__(message)
        self.stale = stale


class Statement(BaseModel):
    """What a follower signs."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(min_length=1, max_length=253)
    role: Literal["admin", "team"]
    queues: list[str] = Field(max_length=10_000)
    method: str = Field(min_length=1, max_length=16)
    target: str = Field(min_length=1, max_length=100_000)
    body: str = Field(pattern=r"^[0-9a-f]{64}$")
    expires: float
    term: int = Field(ge=0)
    to: str = Field(max_length=2000)


def body_hash(body: bytes) -> str:
    """The SHA-256 of a request body, lower-case hex (an empty body for none)."""
    return hashlib.sha256(body).hexdigest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, payload: str) -> bytes:
    return hmac.new(secret, payload.encode("ascii"), hashlib.sha256).digest()


def sign(
    secret: bytes,
    caller: Caller,
    *,
    method: str,
    target: str,
    body: bytes,
    term: int,
    to: str,
    now: float | None = None,
) -> str:
    """The :data:`HEADER` value for ``caller``'s request, for the leader of ``term`` at ``to``."""
    statement = Statement(
        name=caller.name,
        role=caller.role,
        queues=sorted(caller.queues),
        method=method,
        target=target,
        body=body_hash(body),
        expires=(time.time() if now is None else now) + LIFETIME,
        term=term,
        to=to,
    )
    payload = _b64(statement.model_dump_json().encode("utf-8"))
    return f"{payload}.{_b64(_mac(secret, payload))}"


class Verifier:
    """The leader's side: checks signed identities, each accepted once."""

    def __init__(self, secret: bytes, *, clock: Callable[[], float] = time.time) -> None:
        self._secret = secret
        self._clock = clock
        self._seen: dict[str, float] = {}  # signature -> until when it could be replayed

    def verify(
        self, value: str, *, method: str, target: str, body: bytes, term: int, address: str
    ) -> Caller:
        """The caller ``value`` names for this request; :class:`Refused` saying why not."""
        if len(value) > MAX_LENGTH or value.count(".") != 1:
            raise Refused("the forwarded identity is malformed")
        payload, signature = value.split(".")
        try:
            given = _unb64(signature)
        except (binascii.Error, ValueError):
            raise Refused("the forwarded identity is malformed") from None
        if not hmac.compare_digest(given, _mac(self._secret, payload)):
            raise Refused("the forwarded identity's signature is not valid")
        try:
            statement = Statement.model_validate_json(_unb64(payload))
        except (binascii.Error, ValueError, ValidationError):
            raise Refused("the forwarded identity is malformed") from None
        now = self._clock()
        if statement.expires <= now:
            raise Refused("the forwarded identity has expired")
        if statement.expires > now + 2 * LIFETIME:
            raise Refused("the forwarded identity expires too far ahead")
        if statement.method != method or statement.target != target:
            raise Refused(
                f"the forwarded identity was signed for {statement.method} "
                f"{statement.target[:200]}, not this request"
            )
        if not hmac.compare_digest(statement.body, body_hash(body)):
            raise Refused("the forwarded identity was signed for another request body")
        if statement.term != term or statement.to != address:
            raise Refused(
                f"the forwarded identity was signed for the leader of term {statement.term} at "
                f"{statement.to[:200]}; this replica leads term {term} at {address}",
                stale=True,
            )
        if len(self._seen) > 1024:  # an expired one is refused above anyway
            self._seen = {s: t for s, t in self._seen.items() if t > now}
        if signature in self._seen:
            raise Refused("the forwarded identity was used already")
        self._seen[signature] = statement.expires
        return Caller(statement.name, statement.role, frozenset(statement.queues))
