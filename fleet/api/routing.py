"""Each route of the API is declared once, beside its handler; everything else is derived.

Theory of operation: a handler module keeps a :class:`RouteTable` and puts
each handler's declaration on it with :meth:`RouteTable.route`::

    @TABLE.route(
        "GET", "/api/v1/jobs", "listJobs", "List jobs, newest first", "jobs",
        parameters=(query("state", "Only jobs in this state.", JobState), LIMIT, CONTINUE),
        replies=(Reply(200, "A page of jobs.", schemas.JobList), BAD_PAGE, UNAUTHORIZED),
    )
    async def list_jobs(
        request: web.Request, *, state: JobState | None, limit: int, continue_: str | None
    ) -> web.Response: ...

The declaration (:class:`Route`) holds the method, the path (aiohttp's
``{name}`` syntax, which is also OpenAPI's), the operation id, a summary and
tag, the path and query parameters (:class:`Parameter`: name, type, bounds,
default, description), the request body's media types, every answer by
status (:class:`Reply`, with its pydantic model), the least role a caller
needs (``access``) and, for a route that changes something, the kind of its
audit records (``audit``).  From it, and from nothing else:

* :func:`add_routes` registers the route with aiohttp at its method and
  path, named by its operation id, so a handler cannot be served without
  its declaration (:mod:`fleet.api.routes` gathers every module's table);
* :func:`fleet.api.openapi.openapi_document` writes the OpenAPI document;
* :mod:`fleet.api.auth` checks the role and records the audit;
* :func:`arguments` reads every declared parameter of a request, in
  declaration order, before the handler runs, and hands the values to the
  handler as keyword arguments (``dryRun`` is ``dry_run``, ``continue`` is
  ``continue_``).  Path parameters are text.  Query text is the first value
  given, or the default.  A number goes through the one parser,
  :func:`fleet.api.params.number`, within the declared bounds (``low``,
  ``high``, also the document's ``minimum`` and ``maximum``); an
  :class:`~enum.Enum` is one of its values (``unknown state 'x'; states:
  ...``); a ``Literal`` is one of its choices (the declared ``invalid`` text
  otherwise, also when it is required and missing, or, for a ``single``
  parameter, given more than once).  A number with a ``header`` is read from
  that header instead when the request carries it (``Last-Event-ID``).  Every
  bad value is the 400 problem of :func:`fleet.api.problems.bad_request`
  naming the parameter.

A declaration is checked when it is made: its path parameters are those of
its path, and the handler's keyword-only parameters are exactly the declared
parameters' arguments.
"""

from __future__ import annotations

import enum
import inspect
import keyword
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal, TypeVar, get_args, get_origin

from aiohttp import web
from pydantic import Field

from fleet.api import params, schemas
from fleet.api.problems import PROBLEM_JSON, Problem, ProblemError, bad_request

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
#: The least a caller must be: anyone (``open``), any valid token (``read``),
#: a team or admin token (``team``; the handler checks the job's queue), an admin.
Access = Literal["open", "read", "team", "admin"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: A declared handler: the request, then its parameters as keyword arguments.
Declared = Callable[..., Awaitable[web.StreamResponse]]
H = TypeVar("H", bound=Declared)

_PATH_PARAMETER: Final = re.compile(r"\{(\w+)\}")


def _argument(name: str) -> str:
    """The handler's keyword for parameter ``name``: ``dryRun`` -> ``dry_run``."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return f"{snake}_" if keyword.iskeyword(snake) else snake


@dataclass(frozen=True, slots=True)
class Parameter:
    """A path or query parameter: what the document says of it and how it is read.

    ``type`` is ``str``, ``int`` (with ``low`` and ``high``), an
    :class:`~enum.Enum` or a ``Literal`` of texts.
    """

    name: str
    location: Literal["path", "query"]
    description: str
    type: Any = str
    required: bool = False
    #: The value a missing query parameter stands for (None: no default).
    default: Any = None
    #: A number's bounds, both included.
    low: int | None = None
    high: int | None = None
    #: A Literal's answer to a value that is not one of its choices (or is missing
    #: when required); None: "query parameter NAME must be CHOICE".
    invalid: str | None = None
    #: A Literal given more than once is invalid (else the first value counts).
    single: bool = False
    #: A number is read from this request header instead, when it is sent.
    header: str | None = None

    def __post_init__(self) -> None:
        numeric = self.type is int
        if numeric != (self.low is not None and self.high is not None):
            raise ValueError(f"parameter {self.name}: a number, and only a number, has bounds")
        if self.header is not None and not numeric:
            raise ValueError(f"parameter {self.name}: only a number is read from a header")
        if self.location == "path" and self.type is not str:
            raise ValueError(f"path parameter {self.name} is text")

    @property
    def argument(self) -> str:
        """The keyword the handler receives the value as."""
        return _argument(self.name)

    @property
    def schema_type(self) -> Any:
        """What the document's schema is made from (a number with its bounds)."""
        if self.type is int:
            return Annotated[int, Field(ge=self.low, le=self.high)]
        return self.type

    def read(self, request: web.Request) -> Any:
        """The value of this parameter in ``request`` (a 400 problem if it is bad)."""
        if self.location == "path":
            return request.match_info[self.name]
        if self.header is not None:
            sent = request.headers.get(self.header)
            if sent:
                return self._number(sent, f"header {self.header}")
        values = request.query.getall(self.name, [])
        if get_origin(self.type) is Literal:
            return self._choice(values)
        if not values:
            return self.default
        raw = values[0]
        if self.type is int:
            return self._number(raw, f"query parameter {self.name}")
        if isinstance(self.type, type) and issubclass(self.type, enum.Enum):
            known = {e.value: e for e in self.type}
            if raw not in known:
                listed = ", ".join(known)
                raise ProblemError(
                    bad_request(f"unknown {self.name} {raw[:40]!r}; {self.name}s: {listed}")
                )
            return known[raw]
        return raw

    def _number(self, raw: str, what: str) -> int:
        assert self.low is not None and self.high is not None
        return params.number(raw, what, low=self.low, high=self.high)

    def _choice(self, values: list[str]) -> str | None:
        choices = get_args(self.type)
        if not values and not self.required:
            return None
        if values and values[0] in choices and not (self.single and len(values) > 1):
            return values[0]
        detail = self.invalid or f"query parameter {self.name} must be {' or '.join(choices)}"
        raise ProblemError(bad_request(detail))


def query(name: str, description: str, type: Any = str, **kw: Any) -> Parameter:
    """A query parameter (see :class:`Parameter` for ``kw``)."""
    return Parameter(name, "query", description, type, **kw)


def path(name: str, description: str) -> Parameter:
    """A path parameter (always required, always text)."""
    return Parameter(name, "path", description, str, required=True)


@dataclass(frozen=True, slots=True)
class RequestBody:
    """A request body: the media types read and what each holds."""

    media_types: tuple[str, ...]
    description: str
    type: Any = str


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer of a route: a status and, unless empty, its body."""

    status: int
    description: str
    #: A pydantic model (its schema goes to components) or a plain type; None: no body.
    body: Any = None
    media_types: tuple[str, ...] = (schemas.JSON,)


@dataclass(frozen=True, slots=True)
class Route:
    """One operation of the API: its declaration and its handler."""

    operation_id: str
    method: Method
    path: str
    summary: str
    tag: str
    replies: tuple[Reply, ...]
    handler: Declared
    parameters: tuple[Parameter, ...] = ()
    body: RequestBody | None = None
    description: str = ""
    #: Who may call it (see :data:`Access`).
    access: Access = "read"
    #: The kind of audit record every call writes (None: not recorded, it reads).
    audit: str | None = None

    def __post_init__(self) -> None:
        where = f"{self.method} {self.path} ({self.operation_id})"
        in_path = _PATH_PARAMETER.findall(self.path)
        declared = [p.name for p in self.parameters if p.location == "path"]
        if sorted(in_path) != sorted(declared):
            raise ValueError(f"{where}: path parameters {declared} for the path's {in_path}")
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise ValueError(f"{where}: a parameter is declared twice")
        signature = inspect.signature(self.handler)
        keywords = [
            n for n, p in signature.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        wanted = [p.argument for p in self.parameters]
        if sorted(keywords) != sorted(wanted):
            raise ValueError(f"{where}: the handler takes {keywords}, the declaration {wanted}")

    @property
    def auth(self) -> bool:
        """Takes a bearer token."""
        return self.access != "open"


def arguments(route: Route, request: web.Request) -> dict[str, Any]:
    """Every declared parameter of ``route`` read from ``request``, by handler keyword."""
    return {p.argument: p.read(request) for p in route.parameters}


def _serve(route: Route) -> Handler:
    async def serve(request: web.Request) -> web.StreamResponse:
        return await route.handler(request, **arguments(route, request))

    serve.__name__ = serve.__qualname__ = route.handler.__name__
    serve.__doc__ = route.handler.__doc__
    return serve


@dataclass(slots=True)
class RouteTable:
    """The declared routes of one module, in declaration order."""

    routes: list[Route] = field(default_factory=list)

    def route(
        self,
        method: Method,
        path: str,
        operation_id: str,
        summary: str,
        tag: str,
        *,
        replies: tuple[Reply, ...],
        parameters: tuple[Parameter, ...] = (),
        body: RequestBody | None = None,
        description: str = "",
        access: Access = "read",
        audit: str | None = None,
    ) -> Callable[[H], H]:
        """Declare the decorated handler's route (see the module docstring)."""

        def declare(handler: H) -> H:
            self.routes.append(
                Route(
                    operation_id,
                    method,
                    path,
                    summary,
                    tag,
                    replies,
                    handler,
                    parameters,
                    body,
                    description,
                    access,
                    audit,
                )
            )
            return handler

        return declare

    def __iter__(self) -> Iterator[Route]:
        return iter(self.routes)

    def __len__(self) -> int:
        return len(self.routes)


def add_routes(router: web.UrlDispatcher, routes: Iterable[Route]) -> dict[str, Route]:
    """Register ``routes`` at their methods and paths, each named by its operation id and
    served with its parameters read (:func:`arguments`); the routes by operation id.

    Two routes with one operation id, or one method and path, are an error.
    """
    table: dict[str, Route] = {}
    seen: set[tuple[str, str]] = set()
    for r in routes:
        if r.operation_id in table or (r.method, r.path) in seen:
            raise ValueError(f"{r.method} {r.path} ({r.operation_id}) is declared twice")
        table[r.operation_id] = r
        seen.add((r.method, r.path))
        router.add_route(r.method, r.path, _serve(r), name=r.operation_id)
    return table


# Declarations shared by routes ---------------------------------------------------------


def problem(status: int, description: str) -> Reply:
    """An answer with an RFC 9457 problem."""
    return Reply(status, description, Problem, (PROBLEM_JSON,))


UNAUTHORIZED: Final = problem(401, "No valid bearer token.")
FORBIDDEN: Final = problem(403, "The token may not do this (a team token outside its queues).")
ADMIN_ONLY: Final = problem(403, "Only an admin token may do this.")
BAD_PAGE: Final = problem(400, "A parameter is malformed, or the continue token is not valid.")
DRY_RUN: Final = query(
    "dryRun",
    "All: answer what the change would do now, and change nothing (Kubernetes' dryRun).",
    Literal["All"],
    invalid="dryRun must be All (Kubernetes' only dry-run value)",
    single=True,
)
LIMIT: Final = query("limit", "Items per page.", int, default=100, low=1, high=1000)
CONTINUE: Final = query("continue", "The continue token of the previous page.")
JOB_PATH: Final = (
    path("namespace", "The job's namespace."),
    path("name", "The job's name."),
)
