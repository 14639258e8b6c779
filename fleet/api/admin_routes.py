"""The administration routes: the quota tree (replace, patch, history), node health, audit.

Theory of operation: a handler reads and validates the whole request first
(the tree in full, with every broken rule listed, as ``fleet check quota``
does); anything wrong is a problem and nothing changes.  The change itself
is handed to the scheduler loop (:mod:`fleet.service.admin`), which applies it to
the core and stores it in one transaction; the handler then answers with
what happened.  ``?dryRun=All`` answers what a tree change would do now and
changes nothing.  Every tree change answers what the tree promises beyond
the members' healthy capacity (``overpromised``, :mod:`fleet.core.inventory`),
the dry run too; it is a report, and the tree is applied all the same.  A
real member's kubeconfig is checked before anything is
stored or connected (:mod:`fleet.clusters.kube.kubeconfig`): a path that
resolves outside ``--kubeconfig-dir``, a user that runs a credential plugin
(unless allowed), or a file that cannot be read is a 422 on
``spec.kubeconfig.path`` (the last with a fixed message: the details are in
the server log, the file's content nowhere).  Each handler carries its route's one declaration
(:mod:`fleet.api.routing`); who may call it is checked before the handler
runs (:mod:`fleet.api.auth`), and every call of a route that writes is
audited.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Final

import yaml
from aiohttp import web
from pydantic import ValidationError

from fleet.api import admin_schemas, auth, keys, params
from fleet.api.admin_schemas import (
    AuditKind,
    FailedJob,
    MovedJob,
    NodeHealthChange,
    OverLimitNode,
    Overpromised,
    TreeChange,
)
from fleet.api.problems import (
    FieldError,
    ProblemError,
    bad_request,
    conflict,
    field_error,
    from_spec_error,
    invalid,
    not_found,
    unsupported_media_type,
)
from fleet.api.routing import (
    ADMIN_ONLY,
    BAD_PAGE,
    CONTINUE,
    DRY_RUN,
    LIMIT,
    UNAUTHORIZED,
    Reply,
    RequestBody,
    RouteTable,
    path,
    problem,
    query,
)
from fleet.api.schemas import json_response
from fleet.api.submissions import YAML_MEDIA_TYPES
from fleet.clusters.kube.kubeconfig import KubeconfigError
from fleet.clusters.sim import SimulatedCluster
from fleet.core.quota import OVER_MAX
from fleet.core.resources import format_quantity
from fleet.manifests import convert
from fleet.manifests.documents import YAML_LOADER
from fleet.manifests.errors import SpecError
from fleet.manifests.models import MemberClusterModel
from fleet.manifests.yaml_stream import YamlLimitError, YamlLimits, read_documents
from fleet.service import admin, wiring
from fleet.service.wiring import Service
from fleet.store import admin as admin_rows
from fleet.store import paging

JSON_TYPES: Final = ("application/merge-patch+json", "application/json")
PATCHABLE: Final = (
    "min",
    "max",
    "namespaces",
    "preemptMinRuntime",
    "reclaimMinRuntime",
    "maxRuntime",
    "maxRuntimeAction",
)
TABLE: Final = RouteTable()


def _svc(request: web.Request) -> Service:
    return request.app[keys.SERVICE]


def _time(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        msg = f"the request body is not UTF-8 text (byte 0x{body[e.start]:02x} at offset {e.start})"
        raise ProblemError(bad_request(msg)) from None


def _answer(svc: Service, result: admin.TreeChangeResult, warnings: list[str]) -> web.Response:
    effect = result.effect
    over = [
        OverLimitNode(
            node=b.node,
            leaf=b.leaf,
            limit="max" if b.kind == OVER_MAX else "min",
            resource=b.resource,
            used=format_quantity(b.resource, b.used),
            allowed=format_quantity(b.resource, b.limit),
            reclaimable=list(effect.reclaimable.get(b.node, ())),
        )
        for b in effect.over_limit
    ]
    body = TreeChange(
        dry_run=result.version is None,
        version=result.version,
        over_limit=over,
        moved=[MovedJob(job=m.job, from_queue=m.old, to_queue=m.new) for m in effect.moved],
        failed=[FailedJob(job=f.job, reason=f.reason) for f in effect.failed],
        warnings=warnings,
        overpromised=[Overpromised(**s.quantities()) for s in result.overpromised],
    )
    return json_response(body)


async def _change(request: web.Request, document: str, *, dry_run: bool) -> web.Response:
    """Validate ``document`` in full, then apply it (or preview it with ``dry_run``)."""
    svc = _svc(request)
    try:
        result, warnings = await wiring.change_tree(
            svc, document, auth.caller(request).name, dry_run=dry_run
        )
    except SpecError as e:
        raise ProblemError(from_spec_error(e)) from None
    return _answer(svc, result, warnings)


@TABLE.route(
    "PUT",
    "/api/v1/quota-tree",
    "replaceQuotaTree",
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
        problem(400, "The body is not UTF-8, or dryRun is not All."),
        UNAUTHORIZED,
        ADMIN_ONLY,
        problem(413, "The body is larger than the service reads."),
        problem(415, "The body is not YAML."),
        problem(422, "The tree is not acceptable; every error has its field path."),
    ),
)
async def replace_quota_tree(request: web.Request, *, dry_run: str | None) -> web.Response:
    """``PUT /api/v1/quota-tree``: the whole tree, validated in full first."""
    if request.content_type not in YAML_MEDIA_TYPES:
        raise ProblemError(unsupported_media_type(request.content_type, YAML_MEDIA_TYPES))
    return await _change(request, _text(await request.read()), dry_run=dry_run is not None)


# PATCH ----------------------------------------------------------------------------------------


def _patch_body(request: web.Request, body: bytes) -> object:
    text = _text(body)
    if request.content_type in JSON_TYPES:
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as e:
            raise ProblemError(
                bad_request(f"the request body is not JSON: {str(e)[:200]}")
            ) from None
    settings = request.app[keys.SETTINGS]
    limits = YamlLimits(
        max_documents=2,
        max_depth=min(20, settings.max_yaml_depth),
        max_alias_nodes=settings.max_yaml_alias_nodes,
    )
    try:
        docs = list(read_documents(text, YAML_LOADER, limits))
    except (yaml.YAMLError, YamlLimitError, ValueError, RecursionError) as e:
        raise ProblemError(bad_request(f"the request body is not YAML: {str(e)[:200]}")) from None
    if len(docs) != 1:
        raise ProblemError(bad_request("the request body must hold exactly one YAML document"))
    return docs[0]


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _find(node: Any, name: str) -> dict[str, Any] | None:
    if not isinstance(node, dict):
        return None
    if node.get("name") == name:
        return node
    for child in node.get("children") or []:
        found = _find(child, name)
        if found is not None:
            return found
    return None


@TABLE.route(
    "PATCH",
    "/api/v1/quota-tree/nodes/{name}",
    "patchQuotaNode",
    "Change one node's min, max or namespaces",
    "queues",
    access="admin",
    audit="quota-tree",
    parameters=(path("name", "The node's name."), DRY_RUN),
    body=RequestBody(
        ("application/merge-patch+json", "application/json", "application/yaml"),
        "A JSON merge patch (RFC 7386) of the node: min, max (null: unlimited), namespaces.",
        admin_schemas.NodePatch,
    ),
    description="The patched tree is validated in full like a PUT.",
    replies=(
        Reply(200, "The change (or, with dryRun, what it would do).", admin_schemas.TreeChange),
        problem(400, "The body cannot be read, or dryRun is not All."),
        UNAUTHORIZED,
        ADMIN_ONLY,
        problem(404, "No such node, or no tree is loaded yet."),
        problem(413, "The body is larger than the service reads."),
        problem(415, "The body is neither JSON nor YAML."),
        problem(422, "The patch or the patched tree is not acceptable."),
    ),
)
async def patch_quota_node(request: web.Request, *, name: str, dry_run: str | None) -> web.Response:
    """``PATCH /api/v1/quota-tree/nodes/{name}``: one node's min, max, namespaces."""
    svc = _svc(request)
    media = (*JSON_TYPES, *YAML_MEDIA_TYPES)
    if request.content_type not in media:
        raise ProblemError(unsupported_media_type(request.content_type, media))
    patch = _patch_body(request, await request.read())
    if not isinstance(patch, dict):
        raise ProblemError(invalid([field_error("the patch must be an object (a mapping)")]))
    unknown = [str(k) for k in patch if k not in PATCHABLE]
    if unknown:
        errors = [
            field_error(f"only {', '.join(PATCHABLE)} may be patched", path=k[:60]) for k in unknown
        ]
        raise ProblemError(invalid(errors))
    try:
        admin_schemas.NodePatch.model_validate(patch)
    except ValidationError as e:
        errors = [
            field_error(err["msg"], path=".".join(str(p) for p in err["loc"])) for err in e.errors()
        ]
        raise ProblemError(invalid(errors)) from None
    try:
        document = next(iter(read_documents(svc.tree_document, YAML_LOADER)))
    except StopIteration:
        raise ProblemError(not_found("no quota tree is loaded yet")) from None
    spec = document.get("spec") if isinstance(document, dict) else None
    node = _find(spec.get("root") if isinstance(spec, dict) else None, name)
    if node is None:
        raise ProblemError(not_found(f"no node {name[:60]!r} in the quota tree"))
    for field in PATCHABLE:
        if field not in patch:
            continue
        if patch[field] is None:
            node.pop(field, None)
        elif field in ("min", "max"):
            node[field] = _merge(node.get(field) or {}, patch[field])
        else:
            node[field] = patch[field]
    text = yaml.safe_dump(document, sort_keys=False)
    return await _change(request, text, dry_run=dry_run is not None)


# History ----------------------------------------------------------------------------------


@TABLE.route(
    "GET",
    "/api/v1/quota-tree/history",
    "quotaTreeHistory",
    "Every version of the quota tree, newest first: author, time, diff",
    "queues",
    parameters=(LIMIT, CONTINUE),
    replies=(Reply(200, "A page of versions.", admin_schemas.TreeHistory), BAD_PAGE, UNAUTHORIZED),
)
async def quota_tree_history(
    request: web.Request, *, limit: int, continue_: str | None
) -> web.Response:
    """``GET /api/v1/quota-tree/history``: versions newest first."""
    svc = _svc(request)
    try:
        async with svc.db.read() as session:
            rows, token = await admin_rows.tree_page(session, limit=limit, after=continue_)
    except paging.BadContinueToken:
        raise params.bad_continue() from None
    items = [
        admin_schemas.TreeVersion(
            version=r.version, author=r.author, created_at=_time(r.created_at), diff=r.diff
        )
        for r in rows
    ]
    return json_response(admin_schemas.TreeHistory(items=items, continue_=token))


# Member clusters ------------------------------------------------------------------------------


@TABLE.route(
    "PUT",
    "/api/v1/clusters/{name}",
    "putCluster",
    "Add a member cluster or replace its config",
    "clusters",
    access="admin",
    audit="cluster",
    parameters=(path("name", "The member cluster; the document's metadata.name."),),
    body=RequestBody(YAML_MEDIA_TYPES, "One MemberCluster document."),
    description="The cell config is validated in full. Replacing it while jobs run there "
    "is refused (409, naming them) unless every running placement exists in the new "
    "config, except when only a simulated member's spec.nodes changed: the jobs on a "
    "node removed or relabelled are then preempted and queued again, as on a bad node. "
    "A real member keeps the nodes observed in it (status.nodes); a virtual cluster request "
    "those nodes cannot hold is refused (422, at the request's path). A PUT also puts a "
    "draining cluster back in service.",
    replies=(
        Reply(201, "The member cluster was added.", admin_schemas.ClusterChange),
        Reply(200, "The member cluster's config was replaced.", admin_schemas.ClusterChange),
        problem(400, "The body is not UTF-8 text."),
        UNAUTHORIZED,
        ADMIN_ONLY,
        problem(409, "Running jobs would lose their cells; the detail names them."),
        problem(413, "The body is larger than the service reads."),
        problem(415, "The body is not YAML."),
        problem(422, "The document is not acceptable; every error has its field path."),
    ),
)
async def put_cluster(request: web.Request, *, name: str) -> web.Response:
    """``PUT /api/v1/clusters/{name}``: add a member cluster or replace its config."""
    svc = _svc(request)
    if request.content_type not in YAML_MEDIA_TYPES:
        raise ProblemError(unsupported_media_type(request.content_type, YAML_MEDIA_TYPES))
    text = _text(await request.read())
    try:
        models = convert.load_clusters(text)
    except SpecError as e:
        raise ProblemError(from_spec_error(e)) from None
    errors = []
    if len(models) != 1:
        errors.append(field_error("send exactly one MemberCluster", document=1))
    model = models[0]

    def error(message: str, path: str) -> FieldError:
        return field_error(message, document=0, kind="MemberCluster", name=model.name, path=path)

    if model.name != name:
        errors.append(error(f"must be {name[:60]!r}, the name in the path", "metadata.name"))
    known = next((c for c in svc.clusters if c.name == name), None)
    if name in svc.loop.members and known is not None and _reach(known) != _reach(model):
        errors.append(
            error(
                "how a member is reached (simulated, or its kubeconfig) cannot change while "
                "it is a member: DELETE it, and PUT it again once it is removed",
                "spec.kubeconfig" if model.spec.kubeconfig is not None else "spec.simulated",
            )
        )
    try:
        wiring.vc_gpus(model)
    except Exception as e:  # a cell config the allocator cannot build
        errors.append(error(f"cell config: {str(e)[:300]}", "spec.cells"))
    policy = wiring.kubeconfig_policy(svc.settings)
    if not errors:  # the file is opened only for an otherwise valid member
        try:
            await wiring.check_kubeconfig(model, policy)
        except KubeconfigError as e:
            errors.append(error(str(e), "spec.kubeconfig.path"))
    if errors:
        raise ProblemError(invalid(errors))
    backend = None
    if name not in svc.loop.members:  # a new member: connect it first
        backend = wiring.member_backend(model, svc.clock, policy)
        await wiring.start_member(backend)
    added = backend if backend is not None else SimulatedCluster(name, svc.clock)
    try:
        change = await admin.put_cluster(svc.loop, model, lambda n: added)
    except admin.ClusterConflict as e:
        raise ProblemError(conflict(str(e)[:2000])) from None
    except admin.NotHeld as e:
        raise ProblemError(invalid([error(s.message(), s.path) for s in e.shortfalls])) from None
    finally:
        if backend is not None and svc.loop.members.get(name) is not backend:
            await backend.close()  # not added after all
    svc.clusters = [c for c in svc.clusters if c.name != name] + [change.model or model]
    body = admin_schemas.ClusterChange(
        name=name, created=change.created, draining=change.draining, running=list(change.running)
    )
    return json_response(body, status=201 if change.created else 200)


def _reach(model: MemberClusterModel) -> tuple[str, str | None] | None:
    """How a member is reached: None when simulated, else its kubeconfig path and context."""
    kubeconfig = model.spec.kubeconfig
    return None if kubeconfig is None else (kubeconfig.path, kubeconfig.context)


@TABLE.route(
    "DELETE",
    "/api/v1/clusters/{name}",
    "deleteCluster",
    "Drain a member cluster: nothing new is admitted, then it is removed",
    "clusters",
    access="admin",
    audit="cluster",
    parameters=(path("name", "The member cluster."),),
    description="Jobs running there finish (or fail over); once none is left the "
    "cluster is removed.",
    replies=(
        Reply(202, "The cluster is draining.", admin_schemas.ClusterChange),
        UNAUTHORIZED,
        ADMIN_ONLY,
        problem(404, "No such member cluster."),
    ),
)
async def delete_cluster(request: web.Request, *, name: str) -> web.Response:
    """``DELETE /api/v1/clusters/{name}``: drain it."""
    svc = _svc(request)
    try:
        change = await admin.drain_cluster(svc.loop, name)
    except admin.UnknownCluster:
        raise ProblemError(not_found(f"no member cluster {name[:60]!r}")) from None
    body = admin_schemas.ClusterChange(
        name=name, created=False, draining=True, running=list(change.running)
    )
    return json_response(body, status=202)


# Node health ------------------------------------------------------------------------------


@TABLE.route(
    "PUT",
    "/api/v1/clusters/{name}/nodes/{node}/health",
    "setNodeHealth",
    "Mark a node of a member cluster bad or healthy",
    "clusters",
    access="admin",
    audit="node-health",
    parameters=(path("name", "The member cluster."), path("node", "The node.")),
    body=RequestBody(
        ("application/json",),
        '{"healthy": false, "reason": "..."}',
        admin_schemas.NodeHealthChange,
    ),
    description="A bad node's cells are taken out of allocation and the jobs running on "
    "it are preempted and queued again with the reason.",
    replies=(
        Reply(200, "The node's health as recorded.", admin_schemas.NodeHealthResult),
        problem(400, "The body is not JSON."),
        UNAUTHORIZED,
        ADMIN_ONLY,
        problem(404, "No such cluster or node."),
        problem(413, "The body is larger than the service reads."),
        problem(415, "The body is not JSON."),
        problem(422, "The body is not acceptable."),
    ),
)
async def set_node_health(request: web.Request, *, name: str, node: str) -> web.Response:
    """``PUT /api/v1/clusters/{name}/nodes/{node}/health``."""
    svc = _svc(request)
    if request.content_type != "application/json":
        raise ProblemError(unsupported_media_type(request.content_type, ("application/json",)))
    text = _text(await request.read())
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ProblemError(bad_request(f"the request body is not JSON: {str(e)[:200]}")) from None
    try:
        change = NodeHealthChange.model_validate(data)
    except ValidationError as e:
        errors = [
            field_error(err["msg"], path=".".join(str(p) for p in err["loc"])) for err in e.errors()
        ]
        raise ProblemError(invalid(errors)) from None
    cluster = name
    if cluster not in svc.loop.members:
        raise ProblemError(not_found(f"no member cluster {cluster[:60]!r}"))
    try:
        preempted = await admin.set_node_health(
            svc.loop, cluster, node, change.healthy, change.reason
        )
    except admin.UnknownNode:
        raise ProblemError(
            not_found(f"no node {node[:60]!r} in cluster {cluster[:60]!r}")
        ) from None
    body = admin_schemas.NodeHealthResult(
        cluster=cluster,
        node=node,
        healthy=change.healthy,
        reason=change.reason,
        preempted=preempted,
    )
    return json_response(body)


# Audit --------------------------------------------------------------------------------------


@TABLE.route(
    "GET",
    "/api/v1/audit",
    "listAudit",
    "The audit log: every write through the API, newest first",
    "service",
    access="admin",
    parameters=(
        query("actor", "Only records of this token name."),
        query("kind", "Only records of this kind.", AuditKind),
        LIMIT,
        CONTINUE,
    ),
    replies=(
        Reply(200, "A page of audit records.", admin_schemas.AuditList),
        BAD_PAGE,
        UNAUTHORIZED,
        ADMIN_ONLY,
    ),
)
async def list_audit(
    request: web.Request,
    *,
    actor: str | None,
    kind: AuditKind | None,
    limit: int,
    continue_: str | None,
) -> web.Response:
    """``GET /api/v1/audit``: newest first, filtered by actor and kind."""
    svc = _svc(request)
    where = admin_rows.AuditFilter(actor=actor, kind=None if kind is None else kind.value)
    try:
        async with svc.db.read() as session:
            rows, token = await admin_rows.audit_page(session, where, limit=limit, after=continue_)
    except paging.BadContinueToken:
        raise params.bad_continue() from None
    items = [
        admin_schemas.AuditRecord(
            id=r.id,
            time=_time(r.time),
            actor=r.actor,
            kind=AuditKind(r.kind),
            operation=r.operation,
            method=r.method,
            path=r.path,
            status=r.status,
            detail=r.detail,
        )
        for r in rows
    ]
    return json_response(admin_schemas.AuditList(items=items, continue_=token))
