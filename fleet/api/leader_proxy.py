"""Followers forward the leader's routes to the leader (PostgreSQL replicas, decision 0021).

Theory of operation: a follower serves on its own what the database holds
(job lists, submitted documents, submissions, cancellations, audit, tree
history, health).  What only the running scheduler knows — queue usage,
pending order and waiting reasons, a job's reason and estimated start,
cluster GPUs and cells, the change stream — and every administrative change,
which runs inside the loop, is forwarded to the leader at the address its
lease row advertises, with the caller's credentials, and the leader's
answer (an event stream too) is relayed as it comes.  So a client behind one
Kubernetes Service sees one Fleet, whichever replica it reaches.  The leader
authenticates, checks and audits forwarded requests itself; the follower
does not.  While no replica leads (a failover, at most about a lease long)
these routes answer 503 with ``Retry-After`` (a job's detail is then read
from the database, without its waiting reason and estimate); a request
already forwarded once is never forwarded again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

import aiohttp
from aiohttp import web

from fleet.api import keys
from fleet.api.problems import http_problem, problem_response

log = logging.getLogger("fleet.api.proxy")

#: Operations that need the scheduler's own state, or change it.
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
#: Of those, what a follower answers from the database when no leader answers
#: (without what only the leader knows: a waiting job's reason, its estimate).
LOCAL_FALLBACK: Final = frozenset({"getJob"})
#: Set on a forwarded request (the replica it came from).
FORWARDED: Final = "X-Fleet-Forwarded-By"
#: Request headers passed on to the leader.
_REQUEST_HEADERS: Final = (
    "Authorization",
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
    address = leadership.leader_address()
    if address is None and operation in LOCAL_FALLBACK:
        return await handler(request)
    if address is None:
        return _unavailable(
            request,
            "no replica leads the scheduler right now (a new leader is being chosen); "
            "retry in a moment",
            retry,
        )
    forwarded = await _forward(request, address, leadership.identity)
    if forwarded.status == 503 and operation in LOCAL_FALLBACK:
        return await handler(request)
    return forwarded


async def _forward(request: web.Request, address: str, identity: str) -> web.StreamResponse:
    headers = {h: request.headers[h] for h in _REQUEST_HEADERS if h in request.headers}
    headers[FORWARDED] = identity
    body = await request.read() if request.can_read_body else None
    streaming = request.match_info.route.name == "watchViews"
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=CONNECT_TIMEOUT, sock_read=None if streaming else READ_TIMEOUT
    )
    url = address + str(request.rel_url)
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
