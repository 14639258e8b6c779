"""The HTTP routes of jobs, queues and clusters (administration: :mod:`.admin_routes`).

Theory of operation: handlers are thin.  A submission is parsed and checked
whole (:func:`fleet.api.submissions.parse_submission`), stored
(:class:`fleet.service.intake.Intake`, which hands new jobs to the scheduler loop after
the commit).
Jobs are read from the database; queue usage, pending order and waiting
reasons from the immutable view the loop publishes after each iteration, so
no handler ever touches the core's state.  Every error is a
:class:`~fleet.api.problems.ProblemError`.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

from fleet.api import admin_routes, auth, keys, live, openapi, params, schemas
from fleet.api.problems import (
    ProblemError,
    bad_request,
    conflict,
    field_error,
    from_spec_error,
    invalid,
    not_found,
    unsupported_media_type,
)
from fleet.api.submissions import YAML_MEDIA_TYPES, SubmissionLimits, parse_submission
from fleet.core import snapshot
from fleet.core.jobs import Mode
from fleet.core.lifecycle import TERMINAL, JobState
from fleet.manifests import convert
from fleet.manifests.errors import SpecError
from fleet.service import intake, wiring
from fleet.service.views import QueueView
from fleet.service.wiring import Service
from fleet.sim import forecast
from fleet.store import admin as admin_rows
from fleet.store import jobs as job_rows
from fleet.store import paging
from fleet.store.database import redact_url
from fleet.store.models import JobEventRow, JobRow

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 1000


def _svc(request: web.Request) -> Service:
    return request.app[keys.SERVICE]


def _time(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)


# Submissions ----------------------------------------------------------------------


async def submit_jobs(request: web.Request) -> web.Response:
    """``POST /api/v1/submissions``: a PropagationPolicy and the PyTorchJobs it selects."""
    svc = _svc(request)
    if request.content_type not in YAML_MEDIA_TYPES:
        raise ProblemError(unsupported_media_type(request.content_type, YAML_MEDIA_TYPES))
    body = await request.read()
    settings = svc.settings
    limits = SubmissionLimits(
        max_bytes=settings.max_body_bytes,
        max_documents=settings.max_documents,
        max_depth=settings.max_yaml_depth,
        max_alias_nodes=settings.max_yaml_alias_nodes,
        max_replicas=settings.max_replicas_per_job,
        max_string=settings.max_string_length,
    )
    workers = request.app.get(keys.PARSE_WORKERS)
    if workers is None:
        submitted = parse_submission(
            body, tree=svc.tree, clusters=svc.clusters, first_seq=0, limits=limits
        )
    else:
        submitted = await workers.parse(body, tree=svc.tree, clusters=svc.clusters, limits=limits)
    auth.require_namespaces(request, svc.tree, [(s.job.key, s.job.namespace) for s in submitted])
    new = [intake.NewJob(s.job, s.document, s.policy, s.spec_hash, s.suspended) for s in submitted]
    audit = auth.audit_values(request)
    try:
        accepted = await svc.intake.accept(new, audit)
    except intake.NameTaken as e:
        request[keys.AUDITED_KEY] = audit is not None  # stored with the decision
        raise ProblemError(conflict(str(e))) from None
    request[keys.AUDITED_KEY] = audit is not None
    result = schemas.SubmissionResult(
        jobs=[
            schemas.SubmittedJob(
                namespace=a.head.namespace,
                name=a.head.name,
                uid=a.head.uid,
                queue=a.head.queue,
                state=JobState(a.head.state),
                created=a.created,
            )
            for a in accepted
        ]
    )
    return schemas.json_response(result, status=intake.answer_status(accepted))


# Jobs ---------------------------------------------------------------------------------


def _summary(row: JobRow) -> schemas.JobSummary:
    return schemas.JobSummary(
        namespace=row.namespace,
        name=row.name,
        uid=row.uid,
        queue=row.queue,
        state=JobState(row.state),
        priority_class=row.priority_class,
        priority=row.priority,
        mode=None if row.mode is None else Mode(row.mode),
        cluster=row.cluster,
        submitted_at=_time(row.created_at),
    )


def _placement(row: JobRow) -> list[schemas.ReplicaPlacement]:
    return [
        schemas.ReplicaPlacement(replica=pod, node=node, gpus=list(gpus))
        for unit in row.units
        for pod, node, gpus in unit["pods"]
    ]


def _event(event: JobEventRow) -> schemas.JobEvent:
    return schemas.JobEvent(
        time=_time(event.time), type=event.type, reason=event.reason, message=event.message
    )


async def list_jobs(request: web.Request) -> web.Response:
    """``GET /api/v1/jobs``: filtered, in submission order, paged kubectl-style."""
    svc = _svc(request)
    query = request.query
    state = query.get("state")
    if state is not None and state not in {s.value for s in JobState}:
        known = ", ".join(s.value for s in JobState)
        raise ProblemError(bad_request(f"unknown state {state[:40]!r}; states: {known}"))
    where = job_rows.JobFilter(
        queue=query.get("queue"),
        state=state,
        namespace=query.get("namespace"),
        cluster=query.get("cluster"),
        uid=query.get("uid"),
    )
    limit = params.int_query(request, "limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    try:
        async with svc.db.read() as session:
            rows, token = await job_rows.page(
                session, where, limit=limit, after=query.get("continue")
            )
    except paging.BadContinueToken:
        raise params.bad_continue() from None
    result = schemas.JobList(items=[_summary(r) for r in rows], continue_=token)
    return schemas.json_response(result)


async def _job_row(request: web.Request, *, runs: bool = False) -> JobRow:
    """The job the path names: its current run, or with ``runs`` and a ``uid`` query
    parameter the run of that name with that uid (an earlier one included)."""
    svc = _svc(request)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    uid = request.query.get("uid") if runs else None
    async with svc.db.read() as session:
        if uid is None:
            row = await job_rows.by_name(session, namespace, name)
        else:
            row = await job_rows.by_uid(session, uid)
            if row is not None and (row.namespace, row.name) != (namespace, name):
                row = None
    if row is None:
        run = "" if uid is None else f" with uid {uid[:40]!r}"
        raise ProblemError(not_found(f"no job {namespace[:60]}/{name[:60]}{run}"))
    return row


def _reason(svc: Service, row: JobRow) -> str | None:
    if row.state == JobState.QUEUED.value:
        return svc.loop.view.reasons.get(f"{row.namespace}/{row.name}") or row.reason or None
    return row.reason or None


def _estimate(request: web.Request, key: str) -> schemas.EstimatedStart | None:
    """The latest forecast's estimated start of waiting job ``key`` (None: none)."""
    latest = request.app[keys.ESTIMATOR].latest
    found = forecast.estimate_of(latest, key)
    if latest is None or found is None:
        return None
    return schemas.EstimatedStart(
        time=None if found.start is None else _time(found.start),
        assumes=f"{found.assumes}; {latest.assumes}",
        computed_at=_time(latest.at),
    )


async def get_job(request: web.Request) -> web.Response:
    """``GET /api/v1/jobs/{namespace}/{name}``: state, placement, reason, events."""
    svc = _svc(request)
    row = await _job_row(request, runs=True)
    async with svc.db.read() as session:
        events = await job_rows.events_of(session, row.id)
    job = snapshot.job_from_plain(row.record, seq=row.id)
    detail = schemas.JobDetail(
        **_summary(row).model_dump(),
        preemptible=job.preemptible,
        request=schemas.quantities(job.request),
        placement=_placement(row),
        reason=_reason(svc, row),
        suspended=row.suspended,
        estimated_start=(
            _estimate(request, f"{row.namespace}/{row.name}")
            if row.state in (JobState.QUEUED.value, JobState.PREEMPTED.value)
            else None
        ),
        # A team token sees the events of its own namespaces' jobs only.
        events=[_event(e) for e in events]
        if auth.may_act_in(auth.caller(request), svc.tree, row.namespace)
        else [],
    )
    return schemas.json_response(detail)


async def cancel_job(request: web.Request) -> web.Response:
    """``DELETE /api/v1/jobs/{namespace}/{name}``: cancel (and remove from its member)."""
    svc = _svc(request)
    row = await _job_row(request)
    auth.require_namespaces(request, svc.tree, [(f"job {row.namespace}/{row.name}", row.namespace)])
    if JobState(row.state) in TERMINAL:
        raise ProblemError(conflict(f"job {row.namespace}/{row.name} has ended ({row.state})"))
    await wiring.cancel(svc, row.id, f"{row.namespace}/{row.name}")
    return schemas.json_response(_summary(row), status=202)


# Queues, tree, clusters ----------------------------------------------------------------


def _queue_fields(q: QueueView) -> dict[str, object]:
    return {
        "name": q.name,
        "parent": q.parent,
        "leaf": q.leaf,
        "namespaces": list(q.namespaces),
        "min": dict(q.min),
        "max": dict(q.max or {}),
        "used": dict(q.used),
        "borrowed": dict(q.borrowed),
        "admitted": q.admitted,
    }


async def list_queues(request: web.Request) -> web.Response:
    view = _svc(request).loop.view
    items = [schemas.QueueSummary(**_queue_fields(q), pending=q.pending) for q in view.queues]
    return schemas.json_response(schemas.QueueList(items=items))


async def get_queue(request: web.Request) -> web.Response:
    view = _svc(request).loop.view
    name = request.match_info["name"]
    found = next((q for q in view.queues if q.name == name), None)
    if found is None:
        raise ProblemError(not_found(f"no queue {name[:60]!r}"))
    pending = [
        schemas.PendingJob(
            position=i + 1,
            job=p.job,
            priority=p.priority,
            priority_class=p.priority_class,
            request=dict(p.request),
            reason=p.reason,
            estimated_start=_estimate(request, p.job),
        )
        for i, p in enumerate(view.pending.get(name, ()))
    ]
    return schemas.json_response(schemas.QueueDetail(**_queue_fields(found), pending=pending))


async def get_quota_tree(request: web.Request) -> web.Response:
    return web.Response(text=_svc(request).tree_document, content_type="application/yaml")


async def simulate_quota_tree(request: web.Request) -> web.Response:
    """``POST /api/v1/quota-tree?dryRun=Simulate``: the proposed tree against the live queue."""
    svc = _svc(request)
    if request.query.get("dryRun") != "Simulate":
        raise ProblemError(
            bad_request("POST /api/v1/quota-tree only simulates: add ?dryRun=Simulate")
        )
    horizon = params.int_query(request, "horizon", 86_400, low=60, high=2_592_000)
    if request.content_type not in YAML_MEDIA_TYPES:
        raise ProblemError(unsupported_media_type(request.content_type, YAML_MEDIA_TYPES))
    try:
        text = (await request.read()).decode("utf-8")
    except UnicodeDecodeError:
        raise ProblemError(bad_request("the request body is not UTF-8 text")) from None
    try:
        tree, _ = convert.load_quota(text)
    except SpecError as e:
        raise ProblemError(from_spec_error(e, instance=request.path)) from None
    try:
        with request.app[keys.SIMULATION_SLOTS].take(auth.caller(request)):
            result = await forecast.compare(
                svc.db,
                svc.tree_document,
                text,
                tree.leaves(),
                wiring.clusters_document(svc),
                svc.clock.now(),
                horizon=float(horizon),
                worker=request.app[keys.ESTIMATOR].worker,
            )
    except forecast.UnknownQueues as e:
        raise ProblemError(invalid([field_error(str(e), path="spec.root")])) from None
    except ValueError as e:  # the live jobs cannot be restored under the proposal
        message = f"the proposed tree cannot hold the live jobs: {e}"
        raise ProblemError(invalid([field_error(message, path="spec.root")])) from None

    def when(t: float | None) -> datetime.datetime | None:
        return None if t is None else _time(t)

    body = schemas.QuotaTreeSimulation(
        computed_at=_time(result.at),
        horizon_seconds=result.horizon,
        assumes=result.assumes,
        jobs=[
            schemas.JobStartChange(
                job=j.job,
                queue=j.queue,
                current=when(j.current),
                proposed=when(j.proposed),
                change=j.change,
            )
            for j in result.jobs
        ],
        preempted=[
            schemas.PreemptionChange(job=k, current=a, proposed=b)
            for k, (a, b) in result.preempted.items()
        ],
        queues=[
            schemas.QueueWait(name=q, current_wait_seconds=a, proposed_wait_seconds=b)
            for q, (a, b) in result.waits.items()
        ],
    )
    return schemas.json_response(body)


#: What a team or read token is told of a member's health instead of its backend's message.
HEALTH_PHRASES: Final = {True: "ready", False: "not ready"}


async def list_clusters(request: web.Request) -> web.Response:
    """``GET /api/v1/clusters``; a member's health message is for admin callers only.

    The message is the member backend's own free text (an API server's
    answer, a kubeconfig problem): other callers get the readiness flag
    (``health``) and a fixed phrase.
    """
    svc = _svc(request)
    view = svc.loop.view
    admin = auth.caller(request).admin
    items = []
    async with svc.db.read() as session:
        bad = await admin_rows.bad_nodes(session)
    for cluster in svc.clusters:
        if cluster.name not in svc.loop.members:
            continue  # drained and removed
        member = svc.loop.members.get(cluster.name)
        health = await member.health() if member is not None else None
        reachable = health is not None and health.reachable
        gpus = view.clusters.get(cluster.name)
        total, used = (gpus.total, gpus.used) if gpus else (0, 0)
        vcs = gpus.vcs if gpus else {}
        items.append(
            schemas.ClusterSummary(
                name=cluster.name,
                labels=dict(cluster.labels),
                simulated=cluster.spec.simulated,
                health=schemas.ClusterHealth.HEALTHY
                if reachable
                else schemas.ClusterHealth.UNREACHABLE,
                message=(health.message if health is not None else "no member backend")
                if admin
                else HEALTH_PHRASES[reachable],
                bad_nodes=[b.node for b in bad if b.cluster == cluster.name],
                draining=cluster.name in view.draining,
                gpus=schemas.GpuCounts(total=total, used=used, free=total - used),
                virtual_clusters=[
                    schemas.VirtualClusterGpus(
                        name=vc,
                        gpus=schemas.GpuCounts(total=size, used=u, free=max(0, size - u)),
                        doomed_cells=view.doomed.get(cluster.name, {}).get(vc, 0),
                    )
                    for vc, (size, u) in sorted(vcs.items())
                ],
            )
        )
    return schemas.json_response(schemas.ClusterList(items=items))


# Service ----------------------------------------------------------------------------------


async def liveness(request: web.Request) -> web.Response:
    svc = request.app.get(keys.SERVICE)
    if svc is None:
        return schemas.json_response(schemas.Liveness())
    leadership = svc.leadership
    if leadership is None:
        return schemas.json_response(schemas.Liveness(role=svc.role))
    seen = leadership.seen
    term = leadership.term if leadership.leading else (seen.term if seen is not None else None)
    leader = leadership.leader_address()
    shown = None if leader is None else redact_url(leader)  # an address may carry credentials
    body = schemas.Liveness(role=svc.role, term=term, leader=shown)
    return schemas.json_response(body)


async def readiness(request: web.Request) -> web.Response:
    checks: dict[str, str] = {}
    svc = request.app.get(keys.SERVICE)
    # A follower serves from the database and forwards the rest: it is ready as it is.
    ready_state = svc is not None and (not svc.scheduling or svc.loop.view.ready)
    checks["state"] = "ok" if ready_state else "not rebuilt yet"
    if svc is not None:
        try:
            await svc.db.ping()
            checks["database"] = "ok"
        except Exception as e:  # any driver error means "not ready"
            checks["database"] = f"does not answer ({type(e).__name__})"
    ready = all(v == "ok" for v in checks.values()) and "database" in checks
    body = schemas.Readiness(ready=ready, checks=checks)
    return schemas.json_response(body, status=200 if ready else 503)


async def openapi_json(request: web.Request) -> web.Response:
    return web.json_response(request.app[keys.OPENAPI])


HANDLERS: Final[dict[str, Handler]] = {
    "submitJobs": submit_jobs,
    "listJobs": list_jobs,
    "getJob": get_job,
    "cancelJob": cancel_job,
    "listQueues": list_queues,
    "getQueue": get_queue,
    "getQuotaTree": get_quota_tree,
    "simulateQuotaTree": simulate_quota_tree,
    "listClusters": list_clusters,
    "liveness": liveness,
    "readiness": readiness,
    "openapi": openapi_json,
    **admin_routes.HANDLERS,
    **live.HANDLERS,
}


def add_routes(app: web.Application) -> None:
    """Every route of the table in :mod:`fleet.api.openapi`, and its OpenAPI document."""
    app[keys.OPENAPI] = openapi.openapi_document()
    app[keys.ROUTE_TABLE] = {r.operation_id: r for r in openapi.ROUTES}
    openapi.add_routes(app.router, HANDLERS)
