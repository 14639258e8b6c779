"""Who may do what: authentication, roles per route, and the audit record of every write.

Theory of operation (``docs/design/api-and-access.md``; tokens in :mod:`fleet.api.tokens`):

* Each route's declaration (:mod:`fleet.api.routing`) names the least role
  it needs (:data:`~fleet.api.routing.Access`): ``open`` (health, the document),
  ``read`` (any valid token), ``team`` (a team or admin token; the handler
  then checks the job's namespace with :func:`require_namespaces`), ``admin``.
* **Namespaces**: a namespace belongs to one leaf of the quota tree in force,
  and a team token acts (submits, cancels, reads the documents and events of
  jobs) only in the namespaces its leaves list, whoever submitted the job
  there (:func:`namespaces_of`, ADR 0008).
* **No tokens configured**: every caller is the admin
  :data:`~fleet.api.tokens.NO_TOKENS_CALLER` (the settings refuse to bind
  anything but loopback then, and the service says so in its log at start).
* **Forwarded by a follower** (PostgreSQL): a request that carries
  :data:`fleet.api.replicas.HEADER` instead of a token is taken, by the
  leader only and for the leader's routes only, as the caller a follower
  signed for (:mod:`fleet.api.replicas`); its role is then checked and the
  request audited as for that caller's token.  A forged, expired or
  replayed identity, or one for another request, is a 401; one signed for
  another term or leader a 503 with ``Retry-After``.
* **Answers**: no ``Authorization`` header, a malformed one or an unknown
  token is a 401 problem with ``WWW-Authenticate: Bearer``; a valid token
  whose role is too small is a 403 problem.
* **Users**: a job's user (for a leaf's per-user limits, ``limits.perUser``)
  is the name of the token that submitted it (:func:`user_of`); on a server
  without tokens, the job's ``fleet.io/user`` label, read with the job.
* **Audit**: every request to a route that changes something (a route with
  an ``audit`` kind) is recorded once it is answered, whatever the outcome:
  the caller's token name, the time, the route, the status and the problem's
  detail.  Requests refused with 401 have no caller and are only logged.  A
  submission that reaches the intake has its record written in the intake's
  own transaction (:func:`audit_values`), one transaction fewer per answer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any, Final

from aiohttp import web

from fleet.api import keys, replicas
from fleet.api.problems import Problem, ProblemError, http_problem, problem_response
from fleet.api.routing import Access, Handler, Route
from fleet.api.tokens import NO_TOKENS_CALLER, Caller, Role, TokenStore
from fleet.core.quota import QuotaTree

log = logging.getLogger("fleet.api.auth")

#: RFC 6750's ``b64token``.
_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_BEARER_RE: Final = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +(\S+)")
#: Longest token accepted in a header (a longer one is malformed).
MAX_TOKEN_LENGTH: Final = 512
REALM: Final = "fleet"


# Answers -------------------------------------------------------------------------------


def unauthorized(detail: str, error: str, instance: str) -> web.Response:
    problem = Problem(
        type="https://fleet.io/problems/unauthorized",
        title="Unauthorized",
        status=401,
        detail=detail,
        instance=instance,
    )
    challenge = f'Bearer realm="{REALM}", error="{error}"'
    return problem_response(problem, headers={"WWW-Authenticate": challenge})


def forbidden(detail: str) -> ProblemError:
    """403: the caller's token may not do this."""
    return ProblemError(
        Problem(
            type="https://fleet.io/problems/forbidden",
            title="Forbidden",
            status=403,
            detail=detail,
        )
    )


def caller(request: web.Request) -> Caller:
    """The caller of ``request`` (set by :func:`access_middleware`)."""
    found: Caller | None = request.get(keys.CALLER_KEY)
    return found if found is not None else NO_TOKENS_CALLER


def user_of(who: Caller) -> str | None:
    """The user a job ``who`` submits counts against (a leaf's ``limits.perUser``):
    its token's name; None on a server without tokens, where the job's label
    ``fleet.io/user`` says who (a label anyone may write yields to a token)."""
    return None if who is NO_TOKENS_CALLER else who.name


def namespaces_of(who: Caller, tree: QuotaTree) -> list[str]:
    """The namespaces ``who`` acts in under ``tree``: those its leaves list (sorted)."""
    return sorted(
        ns
        for q in who.queues
        if tree.has_node(q) and tree.is_leaf(q)
        for ns in tree.namespaces_of(q)
    )


def may_act_in(who: Caller, tree: QuotaTree, namespace: str) -> bool:
    """Whether ``who`` may submit, cancel and read the documents of jobs in ``namespace``:
    an admin anywhere, a team token where one of its leaves lists the namespace."""
    return who.admin or tree.queue_for_namespace(namespace) in who.queues


def require_namespaces(
    request: web.Request, tree: QuotaTree, namespaces: Iterable[tuple[str, str]]
) -> None:
    """403 unless the caller may act in every namespace of ``(what, namespace)`` pairs."""
    who = caller(request)
    if who.admin:
        return
    outside = [(what, ns) for what, ns in namespaces if not may_act_in(who, tree, ns)]
    if outside:
        listed = "; ".join(f"{what} is in namespace {ns}" for what, ns in outside[:10])
        own = ", ".join(namespaces_of(who, tree)) or "none"
        bound = ", ".join(sorted(who.queues))
        raise forbidden(
            f"token {who.name} acts only in the namespaces of its queues ({bound}): {own}; {listed}"
        )


_RANK: Final[dict[Access | Role, int]] = {"open": 0, "read": 1, "team": 2, "admin": 3}


def authenticate(request: web.Request, store: TokenStore) -> Caller | web.Response:
    """The caller of ``request``'s bearer token, or the 401 answer saying what is wrong."""
    header = request.headers.get("Authorization")
    if header is None:
        return unauthorized("this route needs a bearer token", "invalid_request", request.path)
    match = _BEARER_RE.fullmatch(header.strip())
    if match is None or len(match[1]) > MAX_TOKEN_LENGTH or not _TOKEN_RE.fullmatch(match[1]):
        return unauthorized(
            "the Authorization header is not 'Bearer <token>'", "invalid_request", request.path
        )
    found = store.lookup(match[1])
    if found is None:
        return unauthorized("the bearer token is not valid", "invalid_token", request.path)
    return found


async def _forwarded(request: web.Request, value: str) -> Caller | web.Response:
    """The caller a follower signed for (see :mod:`fleet.api.replicas`), or the answer."""
    path = request.path
    if "Authorization" in request.headers:
        detail = f"send a bearer token or {replicas.HEADER}, not both"
        return unauthorized(detail, "invalid_request", path)
    verifier = request.app.get(keys.REPLICA_VERIFIER)
    if verifier is None:
        detail = f"this replica accepts no {replicas.HEADER} (no replica secret is configured)"
        return unauthorized(detail, "invalid_token", path)
    svc = request.app.get(keys.SERVICE)
    leadership = None if svc is None else svc.leadership
    if (
        leadership is None
        or not leadership.leading
        or request.match_info.route.name not in replicas.LEADER_OPERATIONS
    ):
        detail = f"only the leader takes {replicas.HEADER}, and only for the leader's routes"
        return unauthorized(detail, "invalid_token", path)
    body = await request.read() if request.can_read_body else b""
    try:
        return verifier.verify(
            value,
            method=request.method,
            target=str(request.rel_url),
            body=body,
            term=leadership.term,
            address=leadership.address,
        )
    except replicas.Refused as e:
        if e.stale:
            response = problem_response(http_problem(503, str(e), instance=path))
            response.headers["Retry-After"] = "1"
            return response
        return unauthorized(str(e), "invalid_token", path)


def route_of(request: web.Request, table: dict[str, Route]) -> Route | None:
    """The route table entry ``request`` matched (None: no route, aiohttp answers)."""
    name = request.match_info.route.name
    return None if name is None else table.get(name)


def _detail(status: int, problem: Problem | None) -> str:
    if problem is not None and problem.detail:
        return problem.detail[:1000]
    return ""


def audit_values(request: web.Request) -> dict[str, Any] | None:
    """The audit record of ``request`` but its ``time``, ``status`` and ``detail``, for a
    handler that stores it in its own transaction (then it sets ``keys.AUDITED_KEY``);
    None when the request is not audited."""
    route = route_of(request, request.app[keys.ROUTE_TABLE])
    who = request.get(keys.CALLER_KEY)
    if route is None or route.audit is None or who is None or keys.AUDIT not in request.app:
        return None
    return {
        "actor": who.name,
        "kind": route.audit,
        "operation": route.operation_id,
        "method": request.method,
        "path": request.path[:2000],
    }


async def _record(
    request: web.Request, route: Route, who: Caller, status: int, detail: str
) -> None:
    svc = request.app.get(keys.SERVICE)
    audit = request.app.get(keys.AUDIT)
    if svc is None or audit is None or route.audit is None:
        return
    await audit.record(
        {
            "time": svc.clock.now(),
            "actor": who.name,
            "kind": route.audit,
            "operation": route.operation_id,
            "method": request.method,
            "path": request.path[:2000],
            "status": status,
            "detail": detail,
        }
    )


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authenticate, check the route's role, and record every write (see the module docstring)."""
    route = route_of(request, request.app[keys.ROUTE_TABLE])
    if route is None or route.access == "open":
        return await handler(request)
    store = request.app[keys.TOKENS]
    who: Caller = NO_TOKENS_CALLER
    signed = request.headers.get(replicas.HEADER)
    if signed is not None or store.configured:
        found = (
            await _forwarded(request, signed)
            if signed is not None
            else authenticate(request, store)
        )
        if isinstance(found, web.Response):
            log.info("%d %s %s", found.status, request.method, request.raw_path[:200])  # as sent
            return found
        who = found
    request[keys.CALLER_KEY] = who
    status = 500
    problem: Problem | None = None
    try:
        if _RANK[route.access] > _RANK[who.role]:
            raise forbidden(f"token {who.name} ({who.role}) may not {route.summary.lower()}")
        response = await handler(request)
        status = response.status
        return response
    except ProblemError as e:
        status, problem = e.problem.status, e.problem
        raise
    except web.HTTPException as e:
        status = e.status
        raise
    finally:
        if route.audit is not None and not request.get(keys.AUDITED_KEY):
            await _record(request, route, who, status, _detail(status, problem))
