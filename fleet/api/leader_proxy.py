"""Followers forward the leader's routes to the leader (PostgreSQL replicas, decision 0021).

Theory of operation: a follower serves on its own what the database holds
(job lists, submitted documents, submissions, cancellations, audit, tree
history, health).  What only the running scheduler knows — queue usage,
pending order and waiting reasons, a job's reason and estimated start,
cluster GPUs and cells, the change stream — and every administrative change,
which runs inside the loop, is forwarded to the leader at the address its
lease row advertises, and the leader's answer (an event stream too) is
relayed as it comes.  So a client behind one Kubernetes Service sees one
Fleet, whichever replica it reaches.

The caller's token never leaves the follower: whoever can write the lease
row chooses that address, and the hop is plain HTTP.  The follower
authenticates the caller itself (a 401 is answered there) and sends,
instead of ``Authorization``, the caller's identity signed with the
replicas' shared ``replica_secret`` for this one request, this leader and
a few seconds (:mod:`fleet.api.replicas`); the leader verifies it, checks
the caller's role and audits the request as that caller.  Without a
replica secret a follower forwards nothing: it answers these routes with
a 421 problem naming the leader's address, so a client that can reach the
replicas one by one goes there itself (a job's detail it reads from the
database, without its waiting reason and estimate).  While no replica
leads (a failover, at most about a lease long) these routes answer 503
with ``Retry-After`` (a job's detail is then read from the database,
without its waiting reason and estimate); a request already forwarded once
is never forwarded again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

import aiohttp
from aiohttp import web

from fleet.api import auth, keys, replicas
from fleet.api.problems import http_problem, problem_response
from fleet.api.replicas import LEADER_OPERATIONS
from fleet.api.tokens import NO_TOKENS_CALLER, Caller

log = logging.getLogger("fleet.api.proxy")

#: Of the leader's operations (:data:`~fleet.api.replicas.LEADER_OPERATIONS`), what a
#: follower answers from the database when no leader answers
#: (without what only the leader knows: a waiting job's reason, its estimate).
LOCAL_FALLBACK: Final = frozenset({"getJob"})
#: Set on a forwarded request (the replica it came from).
FORWARDED: Final = "X-Fleet-Forwarded-By"
#: Request headers passed on to the leader (never Authorization: see the module docstring).
_REQUEST_HEADERS: Final = (
    "Content-Type",
    "Accept",
    "Last-Event-ID",
    "Traceparent",
    "Tracestate",
)
#: Response headers passed back to the caller.
_RESPONSE_HEADERS: Final = ("Content-Type", "Retry-After", "Location", "Cache-Control", "ETag")
#: Seconds to connect to the leader, and to wait for each part of its answer.
CONNECT_TIMEOUT: Final = 3.0
READ_TIMEOUT: Final = 60.0


class _Client:
    """The application's one client session to the leader, opened on first use."""

    def __init__(self) -> None:
        self.session: aiohttp.ClientSession | None = None

    def get(self) -> aiohttp.ClientSession:
        if self.session is None or self.session.closed:
            self.session = aiohttp.ClientSession(auto_decompress=False)
        return self.session


CLIENT: Final = web.AppKey("leader-proxy", _Client)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _unavailable(request: web.Request, detail: str, retry: float) -> web.Response:
    response = problem_response(http_problem(503, detail, instance=request.path))
    response.headers["Retry-After"] = str(max(1, round(retry)))
    return response


@web.middleware
async def leader_proxy(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Forward the leader's operations from a follower (see the module docstring)."""
    svc = request.app.get(keys.SERVICE)
    if svc is None or svc.leadership is None or svc.scheduling:
        return await handler(request)
    if request.match_info.route.name not in LEADER_OPERATIONS:
        return await handler(request)
    leadership = svc.leadership
    retry = leadership.lease
    if leadership.leading:
        if request.match_info.route.name in LOCAL_FALLBACK:
            return await handler(request)
        return _unavailable(
            request, "this replica is taking over the scheduler; retry in a moment", 1.0
        )
    if FORWARDED in request.headers:
        return _unavailable(
            request, "this replica no longer leads the scheduler; retry in a moment", retry
        )
    operation = request.match_info.route.name
    leader = leadership.leader()
    if leader is None and operation in LOCAL_FALLBACK:
        return await handler(request)
    if leader is None:
        return _unavailable(
            request,
            "no replica leads the scheduler right now (a new leader is being chosen); "
            "retry in a moment",
            retry,
        )
    secret = request.app[keys.SETTINGS].replica_secret
    if secret is None and operation in LOCAL_FALLBACK:
        return await handler(request)
    store = request.app[keys.TOKENS]
    who = auth.authenticate(request, store) if store.configured else NO_TOKENS_CALLER
    if isinstance(who, web.Response):
        return who
    address, term = leader
    if secret is None:
        detail = (
            f"{request.method} {request.path[:200]} is served by the replica that leads the "
            f"scheduler, at {address}; this one forwards it only with a replica secret "
            "(FLEET_REPLICA_SECRET)"
        )
        return problem_response(http_problem(421, detail, instance=request.path))
    key = secret.get_secret_value().encode("utf-8")
    forwarded = await _forward(request, address, leadership.identity, key, who, term)
    if forwarded.status == 503 and operation in LOCAL_FALLBACK:
        return await handler(request)
    return forwarded


async def _forward(
    request: web.Request, address: str, identity: str, key: bytes, who: Caller, term: int
) -> web.StreamResponse:
    headers = {h: request.headers[h] for h in _REQUEST_HEADERS if h in request.headers}
    headers[FORWARDED] = identity
    body = await request.read() if request.can_read_body else None
    target = str(request.rel_url)
    headers[replicas.HEADER] = replicas.sign(
        key, who, method=request.method, target=target, body=body or b"", term=term, to=address
    )
    streaming = request.match_info.route.name == "watchViews"
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=CONNECT_TIMEOUT, sock_read=None if streaming else READ_TIMEOUT
    )
    url = address + target
    try:
        async with (
            request.app[CLIENT]
            .get()
            .request(
                request.method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=timeout,
            ) as upstream
        ):
            passed = {h: upstream.headers[h] for h in _RESPONSE_HEADERS if h in upstream.headers}
            if upstream.headers.get("Content-Type", "").startswith("text/event-stream"):
                response = web.StreamResponse(status=upstream.status, headers=passed)
                await response.prepare(request)
                try:
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)
                except (ConnectionResetError, aiohttp.ClientError, asyncio.CancelledError):
                    pass  # either side went away: the stream ends
                return response
            return web.Response(status=upstream.status, body=await upstream.read(), headers=passed)
    except (aiohttp.ClientError, TimeoutError) as e:
        log.warning("forwarding %s %s to %s: %s", request.method, request.path, address, e)
        return _unavailable(
            request,
            f"the replica that leads the scheduler ({address}) does not answer; retry in a moment",
            1.0,
        )


async def _close(app: web.Application) -> None:
    session = app[CLIENT].session
    if session is not None:
        await session.close()


def setup(app: web.Application) -> None:
    """Give the application its forwarding client (closed with it)."""
    app[CLIENT] = _Client()
    app.on_cleanup.append(_close)
