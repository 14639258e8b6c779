"""The route table of the HTTP API and the OpenAPI 3.1 document built from it.

Theory of operation: :data:`ROUTES` declares every route the service serves:
method, path (aiohttp's ``{name}`` syntax, which is also OpenAPI's), an
operation id, a summary, path and query parameters, the media types of the
request body, and every answer by status: a pydantic model from
:mod:`fleet.api.schemas` for JSON, :class:`~fleet.api.problems.Problem` as
``application/problem+json`` for errors, or a plain type for YAML and text
bodies.  The aiohttp application registers its handlers by operation id
(:func:`add_routes`), so a route cannot be served without being documented.

:func:`openapi_document` writes no schema by hand: every model's schema comes
from pydantic (``models_json_schema``, the many-model form of
``model_json_schema``, with ``ref_template="#/components/schemas/{model}"``)
and lands in ``components.schemas``; parameters and plain bodies get theirs
from a ``TypeAdapter``.  JSON Schema 2020-12, which pydantic writes, is
OpenAPI 3.1's own dialect.  Routes under ``/api/v1`` take a bearer token
(reading is open to every token; a team token submits and cancels only in
its queues), so they list 401 and, when they change something, 403.
Each route names the least role it needs (``access``) and, when it changes
something, the kind of its audit records (``audit``); :mod:`fleet.api.auth`
enforces both.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from aiohttp import web
from pydantic import BaseModel, Field, TypeAdapter
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from fleet.api import admin_schemas, live_schemas, schemas
from fleet.api.problems import PROBLEM_JSON, Problem
from fleet.api.submissions import YAML_MEDIA_TYPES
from fleet.core.digits import MAX_VALUE
from fleet.core.lifecycle import JobState
from fleet.manifests.models import ElasticQuotaTreeModel

#: Where ``$ref`` points: the document's ``components.schemas``.
REF_TEMPLATE: Final = "#/components/schemas/{model}"
OPENAPI_VERSION: Final = "3.1.0"
BEARER: Final = "bearer"
#: Whether the service checks bearer tokens (it does: fleet.api.auth).
ACCESS_CONTROL: Final = True

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
#: The least a caller must be: anyone (``open``), any valid token (``read``),
#: a team or admin token (``team``; the handler checks the job's queue), an admin.
Access = Literal["open", "read", "team", "admin"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Parameter:
    """A path or query parameter; ``type`` is what its schema is made from."""

    name: str
    location: Literal["path", "query"]
    description: str
    type: Any = str
    required: bool = False
    #: The value a missing query parameter stands for (None: no default).
    default: Any = None


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
    """One operation of the API."""

    operation_id: str
    method: Method
    path: str
    summary: str
    tag: str
    replies: tuple[Reply, ...]
    parameters: tuple[Parameter, ...] = ()
    body: RequestBody | None = None
    description: str = ""
    #: Who may call it (see :data:`Access`).
    access: Access = "read"
    #: The kind of audit record every call writes (None: not recorded, it reads).
    audit: str | None = None

    @property
    def auth(self) -> bool:
        """Takes a bearer token."""
        return self.access != "open"


def _problem(status: int, description: str) -> Reply:
    return Reply(status, description, Problem, (PROBLEM_JSON,))


def _path(name: str, description: str) -> Parameter:
    return Parameter(name, "path", description, str, required=True)


UNAUTHORIZED: Final = _problem(401, "No valid bearer token.")
FORBIDDEN: Final = _problem(403, "The token may not do this (a team token outside its queues).")
ADMIN_ONLY: Final = _problem(403, "Only an admin token may do this.")
DRY_RUN: Final = Parameter(
    "dryRun",
    "query",
    "All: answer what the change would do now, and change nothing (Kubernetes' dryRun).",
    Literal["All"],
)
LIMIT: Final = Parameter(
    "limit", "query", "Items per page.", Annotated[int, Field(ge=1, le=1000)], default=100
)
CONTINUE: Final = Parameter("continue", "query", "The continue token of the previous page.")
JOB_PATH: Final = (
    _path("namespace", "The PyTorchJob's namespace."),
    _path("name", "The PyTorchJob's name."),
)

ROUTES: Final[tuple[Route, ...]] = (
    Route(
        "submitJobs",
        "POST",
        "/api/v1/submissions",
        "Submit PropagationPolicies and the PyTorchJobs they select",
        "jobs",
        access="team",
        audit="submission",
        body=RequestBody(
            YAML_MEDIA_TYPES,
            "A multi-document YAML stream: PropagationPolicy and PyTorchJob documents. "
            "Every PyTorchJob must be selected by a PropagationPolicy of the stream and every "
            "policy must select one of its jobs.",
        ),
        description="All or nothing: every problem of every document is listed in one 422 "
        "answer and nothing is stored. Submitting the same jobs again with the same specs "
        "changes nothing and answers 200.",
        replies=(
            Reply(201, "The jobs were queued.", schemas.SubmissionResult),
            Reply(
                200, "Every job was already submitted with the same spec.", schemas.SubmissionResult
            ),
            _problem(400, "The body is not UTF-8 text."),
            UNAUTHORIZED,
            FORBIDDEN,
            _problem(409, "A job of the same namespace and name exists with another spec."),
            _problem(413, "The body is larger than the service reads."),
            _problem(415, "The body is not YAML."),
            _problem(422, "The documents are not acceptable; every error has its field path."),
        ),
    ),
    Route(
        "listJobs",
        "GET",
        "/api/v1/jobs",
        "List jobs, newest first, one page at a time",
        "jobs",
        parameters=(
            Parameter("queue", "query", "Only jobs of this leaf queue."),
            Parameter("state", "query", "Only jobs in this state.", JobState),
            Parameter("namespace", "query", "Only jobs of this namespace."),
            Parameter("cluster", "query", "Only jobs placed in this member cluster."),
            Parameter(
                "uid",
                "query",
                "Only the run with this uid, current or earlier (a name submitted again after "
                "its job was cancelled or ended starts a new run; the list shows current runs).",
            ),
            Parameter(
                "limit",
                "query",
                "Jobs per page.",
                Annotated[int, Field(ge=1, le=1000)],
                default=100,
            ),
            Parameter("continue", "query", "The continue token of the previous page."),
        ),
        replies=(
            Reply(200, "A page of jobs.", schemas.JobList),
            _problem(400, "A parameter is malformed, or the continue token is not valid."),
            UNAUTHORIZED,
        ),
    ),
    Route(
        "getJob",
        "GET",
        "/api/v1/jobs/{namespace}/{name}",
        "Describe a job: state, queue, priority, placement, waiting reason, events",
        "jobs",
        parameters=(
            *JOB_PATH,
            Parameter(
                "uid",
                "query",
                "An earlier run of this name, by its uid (default: the current run).",
            ),
        ),
        replies=(
            Reply(200, "The job.", schemas.JobDetail),
            UNAUTHORIZED,
            _problem(404, "No such job, or no run of it with this uid."),
        ),
    ),
    Route(
        "cancelJob",
        "DELETE",
        "/api/v1/jobs/{namespace}/{name}",
        "Cancel a job and remove it from its member cluster",
        "jobs",
        access="team",
        audit="cancel",
        parameters=JOB_PATH,
        description="The cancellation is recorded at once and carried out by the scheduler; "
        "the answer shows the job as recorded.",
        replies=(
            Reply(202, "The cancellation was recorded.", schemas.JobDetail),
            UNAUTHORIZED,
            FORBIDDEN,
            _problem(404, "No such job."),
            _problem(409, "The job has already finished."),
        ),
    ),
    Route(
        "listQueues",
        "GET",
        "/api/v1/queues",
        "Every node of the quota tree with its quota, usage and job counts",
        "queues",
        replies=(Reply(200, "The nodes of the tree.", schemas.QueueList), UNAUTHORIZED),
    ),
    Route(
        "getQueue",
        "GET",
        "/api/v1/queues/{name}",
        "One node of the quota tree with its pending jobs in order",
        "queues",
        parameters=(_path("name", "The node's name."),),
        replies=(
            Reply(200, "The node.", schemas.QueueDetail),
            UNAUTHORIZED,
            _problem(404, "No such node."),
        ),
    ),
    Route(
        "getQuotaTree",
        "GET",
        "/api/v1/quota-tree",
        "The ElasticQuotaTree in force, as YAML",
        "queues",
        replies=(
            Reply(200, "The tree.", ElasticQuotaTreeModel, ("application/yaml",)),
            UNAUTHORIZED,
            _problem(404, "No tree is loaded yet."),
        ),
    ),
    Route(
        "replaceQuotaTree",
        "PUT",
        "/api/v1/quota-tree",
        "Replace the whole ElasticQuotaTree",
        "queues",
        access="admin",
        audit="quota-tree",
        parameters=(DRY_RUN,),
        body=RequestBody(("application/yaml",), "One ElasticQuotaTree document."),
        description="The tree is validated in full first: every broken rule is listed in one "
        "422 answer and nothing changes. Running jobs keep running; a queue left over a limit "
        "admits nothing new until it is within it, and its newest jobs are the first reclaim "
        "victims. Every accepted change is a new version with its author and diff.",
        replies=(
            Reply(200, "The change (or, with dryRun, what it would do).", admin_schemas.TreeChange),
            _problem(400, "The body is not UTF-8, or dryRun is not All."),
            UNAUTHORIZED,
            ADMIN_ONLY,
            _problem(413, "The body is larger than the service reads."),
            _problem(415, "The body is not YAML."),
            _problem(422, "The tree is not acceptable; every error has its field path."),
        ),
    ),
    Route(
        "patchQuotaNode",
        "PATCH",
        "/api/v1/quota-tree/nodes/{name}",
        "Change one node's min, max or namespaces",
        "queues",
        access="admin",
        audit="quota-tree",
        parameters=(_path("name", "The node's name."), DRY_RUN),
        body=RequestBody(
            ("application/merge-patch+json", "application/json", "application/yaml"),
            "A JSON merge patch (RFC 7386) of the node: min, max (null: unlimited), namespaces.",
            admin_schemas.NodePatch,
        ),
        description="The patched tree is validated in full like a PUT.",
        replies=(
            Reply(200, "The change (or, with dryRun, what it would do).", admin_schemas.TreeChange),
            _problem(400, "The body cannot be read, or dryRun is not All."),
            UNAUTHORIZED,
            ADMIN_ONLY,
            _problem(404, "No such node, or no tree is loaded yet."),
            _problem(413, "The body is larger than the service reads."),
            _problem(415, "The body is neither JSON nor YAML."),
            _problem(422, "The patch or the patched tree is not acceptable."),
        ),
    ),
    Route(
        "quotaTreeHistory",
        "GET",
        "/api/v1/quota-tree/history",
        "Every version of the quota tree, newest first: author, time, diff",
        "queues",
        parameters=(LIMIT, CONTINUE),
        replies=(
            Reply(200, "A page of versions.", admin_schemas.TreeHistory),
            _problem(400, "A parameter is malformed, or the continue token is not valid."),
            UNAUTHORIZED,
        ),
    ),
    Route(
        "putCluster",
        "PUT",
        "/api/v1/clusters/{name}",
        "Add a member cluster or replace its config",
        "clusters",
        access="admin",
        audit="cluster",
        parameters=(_path("name", "The member cluster; the document's metadata.name."),),
        body=RequestBody(YAML_MEDIA_TYPES, "One MemberCluster document."),
        description="The cell config is validated in full. Replacing it while jobs run there "
        "is refused (409, naming them) unless every running placement exists in the new "
        "config. A PUT also puts a draining cluster back in service.",
        replies=(
            Reply(201, "The member cluster was added.", admin_schemas.ClusterChange),
            Reply(200, "The member cluster's config was replaced.", admin_schemas.ClusterChange),
            _problem(400, "The body is not UTF-8 text."),
            UNAUTHORIZED,
            ADMIN_ONLY,
            _problem(409, "Running jobs would lose their cells; the detail names them."),
            _problem(413, "The body is larger than the service reads."),
            _problem(415, "The body is not YAML."),
            _problem(422, "The document is not acceptable; every error has its field path."),
        ),
    ),
    Route(
        "deleteCluster",
        "DELETE",
        "/api/v1/clusters/{name}",
        "Drain a member cluster: nothing new is admitted, then it is removed",
        "clusters",
        access="admin",
        audit="cluster",
        parameters=(_path("name", "The member cluster."),),
        description="Jobs running there finish (or fail over); once none is left the "
        "cluster is removed.",
        replies=(
            Reply(202, "The cluster is draining.", admin_schemas.ClusterChange),
            UNAUTHORIZED,
            ADMIN_ONLY,
            _problem(404, "No such member cluster."),
        ),
    ),
    Route(
        "setNodeHealth",
        "PUT",
        "/api/v1/clusters/{name}/nodes/{node}/health",
        "Mark a node of a member cluster bad or healthy",
        "clusters",
        access="admin",
        audit="node-health",
        parameters=(_path("name", "The member cluster."), _path("node", "The node.")),
        body=RequestBody(
            ("application/json",),
            '{"healthy": false, "reason": "..."}',
            admin_schemas.NodeHealthChange,
        ),
        description="A bad node's cells are taken out of allocation and the jobs running on "
        "it are preempted and queued again with the reason.",
        replies=(
            Reply(200, "The node's health as recorded.", admin_schemas.NodeHealthResult),
            _problem(400, "The body is not JSON."),
            UNAUTHORIZED,
            ADMIN_ONLY,
            _problem(404, "No such cluster or node."),
            _problem(413, "The body is larger than the service reads."),
            _problem(415, "The body is not JSON."),
            _problem(422, "The body is not acceptable."),
        ),
    ),
    Route(
        "listAudit",
        "GET",
        "/api/v1/audit",
        "The audit log: every write through the API, newest first",
        "service",
        access="admin",
        parameters=(
            Parameter("actor", "query", "Only records of this token name."),
            Parameter("kind", "query", "Only records of this kind.", admin_schemas.AuditKind),
            LIMIT,
            CONTINUE,
        ),
        replies=(
            Reply(200, "A page of audit records.", admin_schemas.AuditList),
            _problem(400, "A parameter is malformed, or the continue token is not valid."),
            UNAUTHORIZED,
            ADMIN_ONLY,
        ),
    ),
    Route(
        "simulateQuotaTree",
        "POST",
        "/api/v1/quota-tree",
        "What a proposed quota tree would do to the live queue (dryRun=Simulate)",
        "queues",
        parameters=(
            Parameter(
                "dryRun",
                "query",
                "Must be Simulate: nothing is applied; the live queue and running jobs are "
                "replayed by the simulator against the tree in force and the proposed one.",
                Literal["Simulate"],
                required=True,
            ),
            Parameter(
                "horizon",
                "query",
                "Seconds of simulated time each forecast covers at most.",
                Annotated[int, Field(ge=60, le=2_592_000)],
                default=86_400,
            ),
        ),
        body=RequestBody(YAML_MEDIA_TYPES, "One ElasticQuotaTree document: the proposed tree."),
        description="Which waiting jobs would start sooner or later, which running jobs "
        "would be preempted, and each queue's expected wait; nothing is stored.",
        replies=(
            Reply(200, "The two forecasts compared.", schemas.QuotaTreeSimulation),
            _problem(
                400, "dryRun is not Simulate, horizon is malformed, or the body is not UTF-8."
            ),
            UNAUTHORIZED,
            _problem(413, "The body is larger than the service reads."),
            _problem(415, "The body is not YAML."),
            _problem(
                422,
                "The tree is not valid (every error has its field path), or it has no leaf "
                "for the queue of a job that runs or waits.",
            ),
            _problem(
                429,
                "The token runs as many simulations as it may at once "
                "(max_simulations_per_token); Retry-After says when to try again.",
            ),
        ),
    ),
    Route(
        "listClusters",
        "GET",
        "/api/v1/clusters",
        "Member clusters: labels, health, GPUs total, used and free, per virtual cluster",
        "clusters",
        replies=(Reply(200, "The member clusters.", schemas.ClusterList), UNAUTHORIZED),
    ),
    # Dashboards (fleet.api.live) --------------------------------------------------------
    Route(
        "whoami",
        "GET",
        "/api/v1/whoami",
        "The caller: its token's name, role and queues",
        "service",
        replies=(Reply(200, "The caller.", live_schemas.WhoAmI), UNAUTHORIZED),
    ),
    Route(
        "watchViews",
        "GET",
        "/api/v1/events",
        "A server-sent-events stream of the scheduler's published views and the jobs changed",
        "service",
        parameters=(
            Parameter(
                "after",
                "query",
                "The last view version the client has (Last-Event-ID takes precedence); "
                "0 or absent: only the current version.",
                Annotated[int, Field(ge=0, le=MAX_VALUE)],
            ),
        ),
        description="With Accept: text/event-stream, a stream that does not end: a 'view' "
        "event (id: the version; data: a ViewChange as JSON) whenever the scheduler "
        "publishes a new view, the first one at once, and a comment line every 15 s while "
        "nothing changes. Otherwise one ViewChange as JSON, at once (for polling clients).",
        replies=(
            Reply(
                200,
                "The current view and the jobs changed after the given version "
                "(text/event-stream: each event's data).",
                live_schemas.ViewChange,
                (schemas.JSON, "text/event-stream"),
            ),
            _problem(400, "after (or Last-Event-ID) is not a version."),
            UNAUTHORIZED,
            _problem(
                429,
                "The token holds as many event streams open as it may "
                "(max_streams_per_token); Retry-After says when to try again.",
            ),
        ),
    ),
    Route(
        "getClusterCells",
        "GET",
        "/api/v1/clusters/{name}/cells",
        "The cell map of a member cluster: every node's GPUs and the job holding each",
        "clusters",
        parameters=(
            _path("name", "The member cluster."),
            Parameter(
                "limit",
                "query",
                "Nodes per page.",
                Annotated[int, Field(ge=1, le=2000)],
                default=500,
            ),
            CONTINUE,
        ),
        replies=(
            Reply(200, "A page of nodes with their GPU cells.", live_schemas.ClusterCells),
            _problem(400, "A parameter is malformed, or the continue token is not valid."),
            UNAUTHORIZED,
            _problem(404, "No such member cluster."),
        ),
    ),
    Route(
        "getSubmittedJob",
        "GET",
        "/api/v1/jobs/{namespace}/{name}/submitted",
        "The PropagationPolicy and the PyTorchJob as submitted, as YAML",
        "jobs",
        access="team",
        description="A team token reads those of its own queues' jobs only (like the events "
        "of a job).",
        parameters=JOB_PATH,
        replies=(
            Reply(200, "The documents.", str, ("application/yaml",)),
            UNAUTHORIZED,
            _problem(403, "A team token asks for a job outside its queues."),
            _problem(404, "No such job."),
        ),
    ),
    Route(
        "liveness",
        "GET",
        "/healthz",
        "Liveness: the process answers",
        "service",
        access="open",
        replies=(Reply(200, "Alive.", schemas.Liveness),),
    ),
    Route(
        "readiness",
        "GET",
        "/readyz",
        "Readiness: the service can take requests",
        "service",
        access="open",
        replies=(
            Reply(200, "Ready.", schemas.Readiness),
            Reply(503, "Not ready; the checks say why.", schemas.Readiness),
        ),
    ),
    Route(
        "openapi",
        "GET",
        "/api/v1/openapi.json",
        "This OpenAPI document",
        "service",
        access="open",
        replies=(Reply(200, "The OpenAPI 3.1 document.", dict[str, Any]),),
    ),
)

TAGS: Final = {
    "jobs": "Submitting, listing, describing and cancelling PyTorchJobs.",
    "queues": "The quota tree and its queues.",
    "clusters": "Member clusters.",
    "service": "Health and this document.",
}


def route(operation_id: str) -> Route:
    """The route with this operation id (KeyError if none)."""
    for r in ROUTES:
        if r.operation_id == operation_id:
            return r
    raise KeyError(operation_id)


def add_routes(
    router: web.UrlDispatcher,
    handlers: Mapping[str, Handler],
    *,
    routes: Iterable[Route] = ROUTES,
    require_all: bool = True,
) -> None:
    """Register ``handlers`` (operation id -> handler) at their routes' methods and paths.

    Each aiohttp route is named after its operation id.  A handler for an
    unknown operation id is an error, and so, with ``require_all``, is a route
    without a handler.
    """
    table = {r.operation_id: r for r in routes}
    unknown = sorted(set(handlers) - set(table))
    if unknown:
        raise KeyError(f"no route has operation id {', '.join(unknown)}")
    missing = sorted(set(table) - set(handlers))
    if require_all and missing:
        raise KeyError(f"no handler for {', '.join(missing)}")
    for op, r in table.items():
        if op in handlers:
            router.add_route(r.method, r.path, handlers[op], name=op)


# The document -------------------------------------------------------------------------


def _models(routes: Iterable[Route]) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    for r in routes:
        for reply in r.replies:
            body = reply.body
            if isinstance(body, type) and issubclass(body, BaseModel) and body not in found:
                found.append(body)
    return found


def _type_schema(tp: Any) -> dict[str, Any]:
    schema: dict[str, Any] = TypeAdapter(tp).json_schema(ref_template=REF_TEMPLATE)
    return schema


def _parameter(p: Parameter, defs: dict[str, Any]) -> dict[str, Any]:
    schema = _type_schema(p.type)
    defs.update(schema.pop("$defs", {}))
    if p.default is not None:
        schema["default"] = p.default
    return {
        "name": p.name,
        "in": p.location,
        "description": p.description,
        "required": p.required or p.location == "path",
        "schema": schema,
    }


def openapi_document(
    routes: Iterable[Route] = ROUTES, *, title: str = "Fleet", version: str | None = None
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` (JSON data)."""
    routes = tuple(routes)
    models = _models(routes)
    mode: JsonSchemaMode = "serialization"
    refs, top = models_json_schema([(m, mode) for m in models], ref_template=REF_TEMPLATE)
    components: dict[str, Any] = dict(top.get("$defs", {}))
    paths: dict[str, dict[str, Any]] = {}
    for r in routes:
        operation: dict[str, Any] = {
            "operationId": r.operation_id,
            "summary": r.summary,
            "tags": [r.tag],
            "security": [{BEARER: []}] if r.auth and ACCESS_CONTROL else [],
        }
        if r.description:
            operation["description"] = r.description
        if r.parameters:
            operation["parameters"] = [_parameter(p, components) for p in r.parameters]
        if r.body is not None:
            schema = _type_schema(r.body.type)
            operation["requestBody"] = {
                "required": True,
                "description": r.body.description,
                "content": {media: {"schema": schema} for media in r.body.media_types},
            }
        responses: dict[str, Any] = {}
        for reply in r.replies:
            if reply.status in (401, 403) and not ACCESS_CONTROL:
                continue
            answer: dict[str, Any] = {"description": reply.description}
            if reply.body is not None:
                if (reply.body, mode) in refs:
                    schema = dict(refs[reply.body, mode])
                else:
                    schema = _type_schema(reply.body)
                    components.update(schema.pop("$defs", {}))
                answer["content"] = {media: {"schema": schema} for media in reply.media_types}
            responses[str(reply.status)] = answer
        operation["responses"] = responses
        paths.setdefault(r.path, {})[r.method.lower()] = operation
    used_tags = {r.tag for r in routes}
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": title,
            "version": version or _version(),
            "description": "Multi-cluster queueing and quota federation for GPU training jobs. "
            "Errors are RFC 9457 problem details (application/problem+json) with the field "
            "path of every error.",
        },
        "tags": [{"name": t, "description": d} for t, d in TAGS.items() if t in used_tags],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            **(
                {"securitySchemes": {BEARER: {"type": "http", "scheme": "bearer"}}}
                if ACCESS_CONTROL
                else {}
            ),
        },
    }


def _version() -> str:
    try:
        return importlib.metadata.version("fleet")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"
