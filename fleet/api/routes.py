"""The HTTP routes of jobs, policies, queues and clusters (administration: :mod:`.admin_routes`).

Theory of operation: each handler carries its route's one declaration
(:meth:`fleet.api.routing.RouteTable.route`: method, path, role, parameters,
replies), from which the router, the OpenAPI document, the role check and
the reading of its parameters are derived; :data:`ROUTES` gathers the
declarations of this module, :mod:`.admin_routes` and :mod:`.live`, and
:func:`add_routes` serves them.  Handlers are thin.  A submission is parsed and checked
whole (:func:`fleet.api.submissions.read_submission`, with the stored
PropagationPolicies that govern a job without one of its own), then its jobs
and its policies stored in one transaction (:class:`fleet.service.intake.Intake`,
which hands new jobs to the scheduler loop and the stored policies to the
service after the commit; every policy of a submission is a standing one,
and those the replica holds with the same document are not written again).
The policy routes list, show and delete the stored policies, a team token's
namespaces only.  The job list shows each job's GPUs, labels, user, and for a
waiting one its reason and estimated start; ``GET /api/v1/job-events`` the
newest events across jobs (of one namespace or job when asked), a team token's
namespaces only.
Jobs are read from the database; queue usage, pending order and waiting
reasons from the immutable view the loop publishes after each iteration, so
no handler ever touches the core's state; their past (``GET /api/v1/history``)
from the samples the service stores (:mod:`fleet.service.history`).  A job's ``apiVersion`` and
``kind`` are its stored document's (the core sees pod sets, never a kind):
the job list and detail read them from the row they load anyway, a queue's
pending jobs with one query of the leaf's live rows (JSON paths of the
stored documents).  The detail shows the core job's pod sets, with each
set's own minimum where the job's kind sets one (its model reads the stored
document again) and, for a waiting job, its gang's condition worded as
Volcano's PodGroup words it (:func:`unschedulable`); its preemptions are the
row's records (when, by whom, the cause, the quota path), shown, like its
events, to the callers who may act in its namespace.  The quota tree is
answered as its administrator wrote it; as JSON, with the ``status`` the
view gives (:func:`tree_status`: the root's figures in force, what the
members hold, what the tree promises beyond that).  Every error is a
:class:`~fleet.api.problems.ProblemError`.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import pydantic
import yaml
from aiohttp import web

from fleet.api import admin_routes, auth, keys, live, openapi, params, routing, schemas
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
from fleet.api.routing import (
    BAD_PAGE,
    CONTINUE,
    FORBIDDEN,
    JOB_PATH,
    UNAUTHORIZED,
    Reply,
    RequestBody,
    Route,
    RouteTable,
    path,
    problem,
    query,
)
from fleet.api.submissions import (
    YAML_MEDIA_TYPES,
    Parsed,
    limits_of,
    new_jobs,
    read_submission,
)
from fleet.core import snapshot
from fleet.core.fair_share import FairShareView
from fleet.core.jobs import Job, Mode
from fleet.core.lifecycle import TERMINAL, JobState
from fleet.core.resources import GPU, TYPED_GPU_PREFIX, format_quantity
from fleet.core.view import LoopView, QueueView
from fleet.manifests import convert, topology
from fleet.manifests.errors import SpecError
from fleet.manifests.kinds import registry
from fleet.manifests.models import (
    ElasticQuotaTreeModel,
    ElasticQuotaTreeStatus,
    MemberClusterModel,
    QuotaShortfall,
    RootCapacity,
)
from fleet.service import intake, wiring
from fleet.service.wiring import Service
from fleet.sim import forecast
from fleet.store import admin as admin_rows
from fleet.store import configuration, paging
from fleet.store import jobs as job_rows
from fleet.store import samples as sample_rows
from fleet.store.database import redact_url
from fleet.store.models import JobEventRow, JobRow, PolicyRow

TABLE: Final = RouteTable()
#: The most moments ``GET /api/v1/history`` answers (a longer range is merged).
HISTORY_POINTS: Final = 720
#: Bytes only a body with a training runtime holds (``ClusterTrainingRuntime``,
#: ``TrainingRuntime``): such a body is read in the serving process.
_RUNTIME_KIND: Final = b"TrainingRuntime"


def _svc(request: web.Request) -> Service:
    return request.app[keys.SERVICE]


def _time(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)


# Submissions ----------------------------------------------------------------------


@TABLE.route(
    "POST",
    "/api/v1/submissions",
    "submitJobs",
    "Submit jobs and PropagationPolicies (which are stored, and select later jobs too)",
    "jobs",
    access="team",
    audit="submission",
    body=RequestBody(
        YAML_MEDIA_TYPES,
        "A multi-document YAML stream: PropagationPolicy documents and jobs of the "
        "kinds Fleet runs. Every policy is stored (replacing a stored one of its namespace "
        "and name), whether it selects a job of the stream or not; every job must be "
        "selected by a policy of the stream or by a stored policy of its namespace.",
    ),
    description="All or nothing: every problem of every document is listed in one 422 "
    "answer and nothing is stored. A job is governed by the policies of its own "
    "submission when one of them selects it, else by the stored policies of its "
    "namespace (the highest spec.priority, then the most specific selector, applies). "
    "Submitting the same jobs again with the same specs changes nothing and answers 200 "
    "(a job governed by a stored policy is the same job after that policy was edited). "
    "A team token stores policies in its own namespaces only. An administrator's "
    "submission may also register Trainer v2's training runtimes "
    "(ClusterTrainingRuntime, TrainingRuntime documents), which TrainJobs then name; a "
    "team token that sends one is refused (403).",
    replies=(
        Reply(
            201,
            "Jobs were queued, or policies stored or changed, or runtimes registered.",
            schemas.SubmissionResult,
        ),
        Reply(
            200,
            "Every job was already submitted with the same spec, and every policy stored "
            "with the same document.",
            schemas.SubmissionResult,
        ),
        problem(400, "The body is not UTF-8 text."),
        UNAUTHORIZED,
        FORBIDDEN,
        problem(409, "A job of the same namespace and name exists with another spec."),
        problem(413, "The body is larger than the service reads."),
        problem(415, "The body is not YAML."),
        problem(422, "The documents are not acceptable; every error has its field path."),
    ),
)
async def submit_jobs(request: web.Request) -> web.Response:
    """``POST /api/v1/submissions``: jobs and the policies to store."""
    svc = _svc(request)
    if request.content_type not in YAML_MEDIA_TYPES:
        raise ProblemError(unsupported_media_type(request.content_type, YAML_MEDIA_TYPES))
    body = await request.read()
    limits = limits_of(svc.settings)
    workers = request.app.get(keys.PARSE_WORKERS)
    parsed: Parsed
    if workers is None or _RUNTIME_KIND in body:
        # A body that may register training runtimes is read here (they are rare).
        parsed = read_submission(
            body,
            tree=svc.tree,
            clusters=svc.clusters,
            first_seq=0,
            limits=limits,
            runtimes=svc.runtimes,
            policies=svc.policies,
        )
    else:
        parsed = await workers.read(
            body,
            tree=svc.tree,
            clusters=svc.clusters,
            limits=limits,
            runtimes=svc.runtimes,
            policies=svc.policies,
        )
    submitted, registering = parsed.jobs, parsed.runtimes
    user = auth.user_of(auth.caller(request))
    if user is not None:  # the token's name, not a label anyone may write
        submitted = [s.by(user) for s in submitted]
    if registering and not auth.caller(request).admin:
        names = ", ".join(r.key for r in registering)
        raise auth.forbidden(
            f"only an administrator registers training runtimes ({names}); "
            "submit TrainJobs that name a registered one"
        )
    auth.require_namespaces(
        request,
        svc.tree,
        [(s.job.key, s.job.namespace) for s in submitted]
        + [(f"PropagationPolicy {p.key}", p.namespace) for p in parsed.policies],
    )
    await wiring.register_runtimes(
        svc, [(r.key, r.document) for r in registering], auth.caller(request).name
    )
    # Policies stored already with the same document (as this replica read them) are
    # not written again: most submissions send the policy they sent before.
    author = auth.caller(request).name
    changed = [
        intake.NewPolicy(p.namespace, p.name, p.document, author)
        for p in parsed.policies
        if svc.policies.get(p.key) != p.document
    ]
    new = new_jobs(submitted)
    audit = auth.audit_values(request)
    try:
        # One transaction: the jobs, the policies (once accepted) and the audit record.
        accepted = await svc.intake.accept(new, audit, changes=bool(registering), policies=changed)
    except intake.NameTaken as e:
        request[keys.AUDITED_KEY] = audit is not None  # stored with the decision
        raise ProblemError(conflict(str(e))) from None
    request[keys.AUDITED_KEY] = audit is not None
    result = schemas.SubmissionResult(
        runtimes=[r.key for r in registering],
        policies=[p.key for p in parsed.policies],
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
        ],
    )
    status = 201 if registering or changed else intake.answer_status(accepted)
    return schemas.json_response(result, status=status)


# Jobs ---------------------------------------------------------------------------------


def _kind(document: Mapping[str, Any]) -> tuple[str, str]:
    """A stored job document's (apiVersion, kind): the kind lives in the document."""
    return str(document.get("apiVersion") or ""), str(document.get("kind") or "")


def _fields(row: JobRow) -> dict[str, Any]:
    """What a job's summary and its detail both show."""
    api_version, kind = _kind(row.manifest)
    return dict(
        namespace=row.namespace,
        name=row.name,
        api_version=api_version,
        kind=kind,
        uid=row.uid,
        queue=row.queue,
        state=JobState(row.state),
        priority_class=row.priority_class,
        priority=row.priority,
        mode=None if row.mode is None else Mode(row.mode),
        cluster=row.cluster,
        submitted_at=_time(row.created_at),
    )


def _summary(request: web.Request, row: JobRow, started: float | None = None) -> schemas.JobSummary:
    """A job as the list shows it: GPUs, labels, user, why it waits (or why it ended),
    when it last ``started`` running and its run time since (up to now while it holds
    its GPUs, else up to its last change), and when it is expected to start."""
    job = snapshot.job_from_plain(row.record, seq=row.id)
    labels = (row.manifest.get("metadata") or {}).get("labels") or {}
    waiting = row.state in (JobState.QUEUED.value, JobState.PREEMPTED.value)
    holding = row.state in (JobState.RUNNING.value, JobState.DISPATCHED.value)
    svc = _svc(request)
    run = None
    if started is not None:
        run = max(0.0, (svc.clock.now() if holding else row.updated_at) - started)
    return schemas.JobSummary(
        **_fields(row),
        gpus=job.request.amounts.get(GPU, 0),
        labels={str(k): str(v) for k, v in labels.items()},
        user=job.user or None,
        reason=None if holding else _reason(svc, row),
        started_at=None if started is None else _time(started),
        run_seconds=None if run is None else round(run, 1),
        estimated_start=_estimate(request, job.key) if waiting else None,
    )


def _gpu_type(row: JobRow) -> str | None:
    """The GPU type a job's running units are charged for (``gpu.fleet.io/<type>``)."""
    for unit in row.units:
        for name in unit.get("request", {}):
            if name.startswith(TYPED_GPU_PREFIX):
                return str(name).removeprefix(TYPED_GPU_PREFIX)
    return None


def _placement(row: JobRow) -> list[schemas.ReplicaPlacement]:
    return [
        schemas.ReplicaPlacement(replica=pod, node=node, gpus=list(gpus))
        for unit in row.units
        for pod, node, gpus in unit["pods"]
    ]


def _set_minimums(document: Mapping[str, Any]) -> dict[str, int]:
    """Role -> the gang's minimum of that pod set, where the job's kind sets one per set,
    read by the kind's model from the stored document (empty when the kind has none,
    or the document no longer reads)."""
    found = registry.find(document.get("apiVersion"), document.get("kind"))
    if found is None:
        return {}
    try:
        model = found.model.model_validate(document)
    except pydantic.ValidationError:
        return {}
    return {s.role: s.minimum for s in model.pod_sets([]) if s.minimum}


def _pod_sets(row: JobRow, job: Job) -> list[schemas.PodSetDetail]:
    """The core job's pod sets with the kind's minimum per set and the pods placed now."""
    role_of = {p.name: p.role for p in job.pods}
    placed: dict[str, int] = {}
    for unit in row.units:
        for pod, _, _ in unit["pods"]:
            role = role_of.get(pod)
            if role is not None:
                placed[role] = placed.get(role, 0) + 1
    minimums = _set_minimums(row.manifest)
    return [
        schemas.PodSetDetail(
            role=g.role,
            count=g.count,
            per_pod=schemas.quantities(g.per_pod),
            minimum=minimums.get(g.role),
            placed=placed.get(g.role, 0),
            total=schemas.quantities({r: v * g.count for r, v in g.per_pod.items()}),
        )
        for g in job.groups
    ]


def unschedulable(job: Job, sets: Sequence[schemas.PodSetDetail], reason: str) -> str:
    """A waiting gang's condition, worded as Volcano's PodGroup words it:
    ``4/4 pods in gang unschedulable (mpimaster 1, mpiworker 3; 4 must start
    together): <reason>``, a set's own minimum named where its kind sets one."""
    waiting = job.size - sum(s.placed for s in sets)
    shown = ", ".join(
        f"{s.role} {s.count}" + (f" (at least {s.minimum})" if s.minimum else "") for s in sets
    )
    together = (
        "pods may start one at a time" if not job.gang else f"{job.gang_size} must start together"
    )
    return f"{waiting}/{job.size} pods in gang unschedulable ({shown}; {together}): {reason}"


#: The job states, as their events are named.
_STATES: Final = frozenset(s.value for s in JobState)
#: The states of a job that holds its quota (a run lasts while it is in one of them).
_HOLDING: Final = frozenset({"Admitted", "Dispatched", "Running"})


def run_times(
    events: Sequence[JobEventRow], now: float
) -> tuple[float | None, float | None, float]:
    """When the job first and last started running (its Running events; None: never)
    and the seconds it held its quota over all its runs, from its events (oldest first):
    each run from the event that entered a holding state to the one that left them,
    the current run until ``now``."""
    first: float | None = None
    last: float | None = None
    held = 0.0
    since: float | None = None
    for e in events:
        if e.reason not in _STATES:
            continue  # not a transition (Grew, Shrunk, DeadlineExceeded, ...)
        if e.reason == "Running":
            first = e.time if first is None else first
            last = e.time
        if e.reason in _HOLDING:
            since = e.time if since is None else since
        elif since is not None:
            held += max(0.0, e.time - since)
            since = None
    if since is not None:
        held += max(0.0, now - since)
    return first, last, held


def _event(event: JobEventRow) -> schemas.JobEvent:
    return schemas.JobEvent(
        time=_time(event.time), type=event.type, reason=event.reason, message=event.message
    )


@TABLE.route(
    "GET",
    "/api/v1/jobs",
    "listJobs",
    "List jobs, newest first, one page at a time",
    "jobs",
    parameters=(
        query("queue", "Only jobs of this leaf queue."),
        query("state", "Only jobs in this state.", JobState),
        query("namespace", "Only jobs of this namespace."),
        query("cluster", "Only jobs placed in this member cluster."),
        query(
            "uid",
            "Only the run with this uid, current or earlier (a name submitted again after "
            "its job was cancelled or ended starts a new run; the list shows current runs).",
        ),
        query("limit", "Jobs per page.", int, default=100, low=1, high=1000),
        CONTINUE,
    ),
    replies=(Reply(200, "A page of jobs.", schemas.JobList), BAD_PAGE, UNAUTHORIZED),
)
async def list_jobs(
    request: web.Request,
    *,
    queue: str | None,
    state: JobState | None,
    namespace: str | None,
    cluster: str | None,
    uid: str | None,
    limit: int,
    continue_: str | None,
) -> web.Response:
    """``GET /api/v1/jobs``: filtered, in submission order, paged kubectl-style."""
    svc = _svc(request)
    where = job_rows.JobFilter(
        queue=queue,
        state=None if state is None else state.value,
        namespace=namespace,
        cluster=cluster,
        uid=uid,
    )
    try:
        async with svc.db.read() as session:
            rows, token = await job_rows.page(session, where, limit=limit, after=continue_)
    except paging.BadContinueToken:
        raise params.bad_continue() from None
    async with svc.db.read() as session:
        started = await job_rows.started_times(session, [r.id for r in rows])
    items = [_summary(request, r, started.get(r.id)) for r in rows]
    return schemas.json_response(schemas.JobList(items=items, continue_=token))


@TABLE.route(
    "GET",
    "/api/v1/job-events",
    "listJobEvents",
    "The newest events of jobs, newest first (kubectl get events)",
    "jobs",
    parameters=(
        query("namespace", "Only events of jobs of this namespace."),
        query("job", "Only events of this job, as namespace/name (its current run)."),
        query("limit", "Events at most.", int, default=500, low=1, high=5000),
    ),
    description="A team token sees the events of its own namespaces' jobs only, as in a "
    "job's detail.",
    replies=(
        Reply(200, "The events.", schemas.JobEventList),
        problem(400, "job is not namespace/name, or limit is out of bounds."),
        UNAUTHORIZED,
    ),
)
async def list_job_events(
    request: web.Request, *, namespace: str | None, job: str | None, limit: int
) -> web.Response:
    """``GET /api/v1/job-events``: across jobs, of a namespace, or of one job."""
    svc = _svc(request)
    name: str | None = None
    if job is not None:
        job_namespace, sep, name = job.partition("/")
        if (
            not sep
            or not job_namespace
            or not name
            or (namespace or job_namespace) != job_namespace
        ):
            raise ProblemError(bad_request(f"job must be namespace/name, not {job[:120]!r}"))
        namespace = job_namespace
    who = auth.caller(request)
    scope = None if who.admin else auth.namespaces_of(who, svc.tree)
    async with svc.db.read() as session:
        found = await job_rows.recent_events(
            session, limit=limit, namespace=namespace, name=name, namespaces=scope
        )
    items = [
        schemas.JobEventEntry(
            namespace=e.namespace,
            name=e.name,
            uid=e.job_uid,
            time=_time(e.time),
            type=e.type,
            reason=e.reason,
            message=e.message,
        )
        for e in found
    ]
    return schemas.json_response(schemas.JobEventList(items=items))


async def _job_row(
    request: web.Request, namespace: str, name: str, uid: str | None = None
) -> JobRow:
    """The job ``namespace/name``: its current run, or with a ``uid`` the run of that name
    with that uid (an earlier one included)."""
    svc = _svc(request)
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
    estimator = request.app[keys.ESTIMATOR]
    latest = estimator.latest
    found = forecast.estimate_of(latest, key, estimator.clock.now())
    if latest is None or found is None:
        return None
    return schemas.EstimatedStart(
        time=None if found.start is None else _time(found.start),
        earliest=None if found.earliest is None else _time(found.earliest),
        latest=None if found.latest is None else _time(found.latest),
        overdue=found.overdue,
        declared=found.declared,
        assumes=f"{found.assumes}; {latest.assumes}",
        computed_at=_time(latest.at),
    )


def _policy_ref(row: JobRow) -> schemas.PolicyRef | None:
    """The policy that governs the job and where it came from (None for a job stored
    without a policy, or before the source was recorded)."""
    source = row.policy_source
    if row.policy is None or source not in ("submission", "stored"):
        return None
    metadata = row.policy.get("metadata") or {}
    return schemas.PolicyRef(
        namespace=str(metadata.get("namespace") or row.namespace),
        name=str(metadata.get("name") or ""),
        source=source,
    )


@TABLE.route(
    "GET",
    "/api/v1/jobs/{namespace}/{name}",
    "getJob",
    "Describe a job: state, queue, priority, placement, waiting reason, events",
    "jobs",
    parameters=(
        *JOB_PATH,
        query("uid", "An earlier run of this name, by its uid (default: the current run)."),
    ),
    replies=(
        Reply(200, "The job.", schemas.JobDetail),
        UNAUTHORIZED,
        problem(404, "No such job, or no run of it with this uid."),
    ),
)
async def get_job(
    request: web.Request, *, namespace: str, name: str, uid: str | None
) -> web.Response:
    """``GET /api/v1/jobs/{namespace}/{name}``: state, placement, reason, events."""
    svc = _svc(request)
    row = await _job_row(request, namespace, name, uid)
    async with svc.db.read() as session:
        events = await job_rows.events_of(session, row.id)
    job = snapshot.job_from_plain(row.record, seq=row.id)
    sets = _pod_sets(row, job)
    reason = _reason(svc, row)
    waiting = row.state in (JobState.QUEUED.value, JobState.PREEMPTED.value)
    own = auth.may_act_in(auth.caller(request), svc.tree, row.namespace)
    first, last, ran = run_times(events, svc.clock.now())
    detail = schemas.JobDetail(
        **_fields(row),
        preemptible=job.preemptible,
        user=job.user or None,
        request=schemas.quantities(job.request),
        placement=_placement(row),
        pod_sets=sets,
        gang_minimum=job.gang_size,
        gpu_types=list(job.gpu_types),
        gpu_terms=job.gpu_terms,
        gpu_type=_gpu_type(row),
        reason=reason,
        unschedulable=unschedulable(job, sets, reason) if waiting and reason else None,
        suspended=row.suspended,
        policy=_policy_ref(row),
        first_started_at=None if first is None else _time(first),
        last_started_at=None if last is None else _time(last),
        run_time_seconds=round(ran, 3),
        estimated_start=(
            _estimate(request, f"{row.namespace}/{row.name}")
            if row.state in (JobState.QUEUED.value, JobState.PREEMPTED.value)
            else None
        ),
        # A team token sees the events and preemptions of its own namespaces' jobs only.
        preemptions=[_preemption(p) for p in row.preemptions or ()] if own else [],
        events=[_event(e) for e in events] if own else [],
    )
    return schemas.json_response(detail)


def _preemption(record: dict[str, Any]) -> schemas.PreemptionRecord:
    """A stored preemption (``fleet.store.jobs.preemption_record``) as the API shows it."""
    return schemas.PreemptionRecord(
        time=_time(float(record["time"])),
        preemptor=str(record.get("preemptor", "")),
        reason=str(record.get("reason", "")),
        quota_path=[str(n) for n in record.get("quota_path", ())],
        message=str(record.get("message", "")),
    )


@TABLE.route(
    "DELETE",
    "/api/v1/jobs/{namespace}/{name}",
    "cancelJob",
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
        problem(404, "No such job."),
        problem(409, "The job has already finished."),
    ),
)
async def cancel_job(request: web.Request, *, namespace: str, name: str) -> web.Response:
    """``DELETE /api/v1/jobs/{namespace}/{name}``: cancel (and remove from its member)."""
    svc = _svc(request)
    row = await _job_row(request, namespace, name)
    auth.require_namespaces(request, svc.tree, [(f"job {row.namespace}/{row.name}", row.namespace)])
    if JobState(row.state) in TERMINAL:
        raise ProblemError(conflict(f"job {row.namespace}/{row.name} has ended ({row.state})"))
    await wiring.cancel(svc, row.id, f"{row.namespace}/{row.name}")
    return schemas.json_response(_summary(request, row), status=202)


# Policies -----------------------------------------------------------------------------

#: The path of one stored policy.
POLICY_PATH: Final = (
    path("namespace", "The policy's namespace."),
    path("name", "The policy's name."),
)


def selector_text(selector: Mapping[str, Any]) -> str:
    """One resourceSelector as ``Kind``, ``Kind/name`` or ``Kind{k=v,...}``."""
    kind = str(selector.get("kind") or "")
    if selector.get("name"):
        return f"{kind}/{selector['name']}"
    labels = selector.get("labelSelector") or {}
    if labels:
        shown = [f"{k}={v}" for k, v in sorted((labels.get("matchLabels") or {}).items())]
        shown += [
            f"{e.get('key')} {e.get('operator')} {','.join(map(str, e.get('values') or []))}"
            for e in labels.get("matchExpressions") or []
        ]
        return f"{kind}{{{', '.join(s.strip() for s in shown)}}}"
    return kind


def _policy_summary(row: PolicyRow) -> schemas.PolicySummary:
    document = json.loads(row.document)
    spec = document.get("spec") or {}
    priority = spec.get("priority")
    return schemas.PolicySummary(
        namespace=row.namespace,
        name=row.name,
        api_version=row.api_version,
        priority=priority if isinstance(priority, int) else 0,
        selects=[selector_text(s) for s in spec.get("resourceSelectors") or []],
        created=_time(row.created_at),
        updated=_time(row.updated_at),
        author=row.author,
    )


async def _policy_row(request: web.Request, namespace: str, name: str) -> PolicyRow:
    """The stored policy ``namespace/name`` (403 outside a team token's namespaces, 404
    when none is stored)."""
    svc = _svc(request)
    what = f"PropagationPolicy {namespace}/{name}"
    auth.require_namespaces(request, svc.tree, [(what, namespace)])
    async with svc.db.read() as session:
        row = await configuration.stored_policy(session, namespace, name)
    if row is None:
        raise ProblemError(not_found(f"no stored PropagationPolicy {namespace[:60]}/{name[:60]}"))
    return row


@TABLE.route(
    "GET",
    "/api/v1/policies",
    "listPolicies",
    "List the stored PropagationPolicies",
    "policies",
    description="A team token sees the policies of its own namespaces only.",
    replies=(Reply(200, "The policies, by namespace and name.", schemas.PolicyList), UNAUTHORIZED),
)
async def list_policies(request: web.Request) -> web.Response:
    """``GET /api/v1/policies``: the caller's namespaces' (every one for an admin)."""
    svc = _svc(request)
    who = auth.caller(request)
    async with svc.db.read() as session:
        rows = await configuration.stored_policies(session)
    items = [_policy_summary(r) for r in rows if auth.may_act_in(who, svc.tree, r.namespace)]
    return schemas.json_response(schemas.PolicyList(items=items))


@TABLE.route(
    "GET",
    "/api/v1/policies/{namespace}/{name}",
    "getPolicy",
    "One stored PropagationPolicy, as stored",
    "policies",
    access="team",
    parameters=POLICY_PATH,
    description="A team token reads those of its own namespaces only.",
    replies=(
        Reply(200, "The policy's document.", dict[str, Any]),
        UNAUTHORIZED,
        problem(403, "A team token asks for a policy outside its namespaces."),
        problem(404, "No such policy is stored."),
    ),
)
async def get_policy(request: web.Request, *, namespace: str, name: str) -> web.Response:
    """``GET /api/v1/policies/{namespace}/{name}``: the document."""
    row = await _policy_row(request, namespace, name)
    return web.Response(text=row.document, content_type=schemas.JSON)


@TABLE.route(
    "DELETE",
    "/api/v1/policies/{namespace}/{name}",
    "deletePolicy",
    "Delete a stored PropagationPolicy",
    "policies",
    access="team",
    audit="policy",
    parameters=POLICY_PATH,
    description="Later jobs of its namespace are no longer governed by it; jobs it "
    "governed already keep the policy they were stored with.",
    replies=(
        Reply(200, "The policy was deleted; the answer is what was stored.", schemas.PolicySummary),
        UNAUTHORIZED,
        problem(403, "A team token asks for a policy outside its namespaces."),
        problem(404, "No such policy is stored."),
    ),
)
async def delete_policy(request: web.Request, *, namespace: str, name: str) -> web.Response:
    """``DELETE /api/v1/policies/{namespace}/{name}``: forget it."""
    row = await _policy_row(request, namespace, name)
    if not await wiring.delete_policy(_svc(request), namespace, name):
        raise ProblemError(not_found(f"no stored PropagationPolicy {namespace[:60]}/{name[:60]}"))
    return schemas.json_response(_policy_summary(row))


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
        "fair_share": None if q.fair_share is None else _fair_share(q.fair_share),
        "per_user": None
        if q.per_user is None
        else schemas.PerUser(
            limits=dict(q.per_user.limits),
            users=[
                schemas.PerUserUse(
                    user=u.user, running_jobs=u.running_jobs, resources=dict(u.resources)
                )
                for u in q.per_user.users
            ],
        ),
    }


def _fair_share(f: FairShareView) -> schemas.FairShare:
    return schemas.FairShare(
        weight=f.weight,
        half_life_seconds=f.half_life,
        decayed_usage={r: round(v, 3) for r, v in f.decayed.items()},
        share=None if f.share is None else round(f.share, 6),
        rank=f.rank,
        siblings=f.siblings,
        explanation=f.explanation,
    )


@TABLE.route(
    "GET",
    "/api/v1/queues",
    "listQueues",
    "Every node of the quota tree with its quota, usage and job counts",
    "queues",
    replies=(Reply(200, "The nodes of the tree.", schemas.QueueList), UNAUTHORIZED),
)
async def list_queues(request: web.Request) -> web.Response:
    view = _svc(request).loop.view
    items = [schemas.QueueSummary(**_queue_fields(q), pending=q.pending) for q in view.queues]
    return schemas.json_response(schemas.QueueList(items=items))


@TABLE.route(
    "GET",
    "/api/v1/history",
    "getHistory",
    "One series of every leaf queue over time: GPUs used, jobs running or pending, p95 wait",
    "queues",
    description="What the dashboard's charts show, as the service sampled it every "
    "`history_interval` seconds and kept for `history_retention`. A range of more than 720 "
    "samples is merged into 720 stretches, each at its last sample's time with the "
    "stretch's largest values. Readable by every token, as the queues are.",
    parameters=(
        query(
            "series",
            "gpus, running, pending or wait.",
            schemas.HistorySeries,
            required=True,
            invalid="series must be gpus, running, pending or wait",
            single=True,
        ),
        query(
            "since",
            "Seconds before now that the series starts at (default 6 hours).",
            int,
            default=6 * 3600,
            low=1,
            high=366 * 24 * 3600,
        ),
    ),
    replies=(Reply(200, "The series.", schemas.History), BAD_PAGE, UNAUTHORIZED),
)
async def get_history(request: web.Request, *, series: str, since: int) -> web.Response:
    svc = _svc(request)
    start = svc.clock.now() - since
    # At most HISTORY_POINTS moments: a long range is merged into stretches.
    every = svc.settings.history_interval or 60.0
    width = 0.0 if since / every <= HISTORY_POINTS else since / HISTORY_POINTS
    async with svc.db.read() as session:
        rows = await sample_rows.samples_since(session, start, width=width)
    by_time: dict[float, dict[str, sample_rows.Sample]] = {}
    for at, sample in rows:
        by_time.setdefault(at, {})[sample.queue] = sample

    def value(sample: sample_rows.Sample | None) -> float | None:
        if sample is None:
            return None
        if series == "wait":
            return None if sample.wait_p95 is None else round(sample.wait_p95, 1)
        return float(getattr(sample, series))

    queues = sorted({s.queue for _, s in rows if s.queue != sample_rows.FLEET})
    points = [
        schemas.HistoryPoint(
            time=_time(at),
            queues={q: value(s) for q, s in sorted(found.items()) if q != sample_rows.FLEET},
            fleet=value(found.get(sample_rows.FLEET)),
        )
        for at, found in by_time.items()
    ]
    settings = svc.settings
    body = schemas.History(
        series=series,
        unit=schemas.HISTORY_UNITS[series],
        since=_time(start),
        interval=settings.history_interval,
        retention=settings.history_retention,
        queues=queues,
        points=points,
    )
    return schemas.json_response(body)


@TABLE.route(
    "GET",
    "/api/v1/queues/{name}",
    "getQueue",
    "One node of the quota tree with its pending jobs in order",
    "queues",
    parameters=(path("name", "The node's name."),),
    replies=(
        Reply(200, "The node.", schemas.QueueDetail),
        UNAUTHORIZED,
        problem(404, "No such node."),
    ),
)
async def get_queue(request: web.Request, *, name: str) -> web.Response:
    svc = _svc(request)
    view = svc.loop.view
    found = next((q for q in view.queues if q.name == name), None)
    if found is None:
        raise ProblemError(not_found(f"no queue {name[:60]!r}"))
    waiting = view.pending.get(name, ())
    kinds: dict[str, tuple[str, str]] = {}
    if waiting:
        async with svc.db.read() as session:
            kinds = await job_rows.kinds_in_queue(session, name)
    pending = [
        schemas.PendingJob(
            position=i + 1,
            job=p.job,
            api_version=kinds[p.job][0] if p.job in kinds else None,
            kind=kinds[p.job][1] if p.job in kinds else None,
            priority=p.priority,
            priority_class=p.priority_class,
            request=dict(p.request),
            reason=p.reason,
            estimated_start=_estimate(request, p.job),
        )
        for i, p in enumerate(waiting)
    ]
    return schemas.json_response(schemas.QueueDetail(**_queue_fields(found), pending=pending))


def tree_status(view: LoopView) -> dict[str, Any]:
    """The ``status`` of the tree in force: the root's figures (with ``capacity: auto``,
    the members' capacity), the members' healthy capacity, and what the tree
    promises beyond it (:mod:`fleet.core.inventory`)."""
    root = view.queues[0] if view.queues else None
    held = view.inventory.limits()
    status = ElasticQuotaTreeStatus(
        capacity="auto" if view.auto else None,
        root=None if root is None else RootCapacity(min=dict(root.min), max=root.max),
        held={r: format_quantity(r, v) for r, v in held.items()},
        overpromised=[QuotaShortfall(**s.quantities()) for s in view.overpromised],
    )
    found: dict[str, Any] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return found


def with_status(document: str, status: Mapping[str, Any]) -> dict[str, Any]:
    """The tree ``document`` as an object, with ``status`` as its status."""
    written = yaml.safe_load(document)
    tree = dict(written) if isinstance(written, dict) else {}
    tree["status"] = dict(status)
    return tree


@TABLE.route(
    "GET",
    "/api/v1/quota-tree",
    "getQuotaTree",
    "The ElasticQuotaTree in force, as YAML (or, with its status, as JSON)",
    "queues",
    description="As YAML (the default), the document as written (a root of "
    "`capacity: auto` stays so). As JSON (`Accept: application/json`), the same object "
    "with its `status`: the root's figures in force (with `capacity: auto`, the members' "
    "healthy capacity), that capacity (`held`: bad nodes and draining clusters left out), "
    "and `overpromised`: every resource and GPU type the tree guarantees beyond it "
    "(`{resource, promised, held, short}`; empty when it promises no more than exists).",
    replies=(
        Reply(
            200,
            "The tree and its status.",
            ElasticQuotaTreeModel,
            ("application/yaml", schemas.JSON),
        ),
        UNAUTHORIZED,
        problem(404, "No tree is loaded yet."),
    ),
)
async def get_quota_tree(request: web.Request) -> web.Response:
    svc = _svc(request)
    accept = request.headers.get("Accept", "")
    if schemas.JSON in accept and "yaml" not in accept:
        return web.json_response(with_status(svc.tree_document, tree_status(svc.loop.view)))
    return web.Response(text=svc.tree_document, content_type="application/yaml")


@TABLE.route(
    "POST",
    "/api/v1/quota-tree",
    "simulateQuotaTree",
    "What a proposed quota tree would do to the live queue (dryRun=Simulate)",
    "queues",
    parameters=(
        query(
            "dryRun",
            "Must be Simulate: nothing is applied; the live queue and running jobs are "
            "replayed by the simulator against the tree in force and the proposed one.",
            Literal["Simulate"],
            required=True,
            invalid="POST /api/v1/quota-tree only simulates: add ?dryRun=Simulate",
        ),
        query(
            "horizon",
            "Seconds of simulated time each forecast covers at most.",
            int,
            default=86_400,
            low=60,
            high=2_592_000,
        ),
    ),
    body=RequestBody(YAML_MEDIA_TYPES, "One ElasticQuotaTree document: the proposed tree."),
    description="Which waiting jobs would start sooner or later, which running jobs "
    "would be preempted, and each queue's expected wait; nothing is stored.",
    replies=(
        Reply(200, "The two forecasts compared.", schemas.QuotaTreeSimulation),
        problem(400, "dryRun is not Simulate, horizon is malformed, or the body is not UTF-8."),
        UNAUTHORIZED,
        problem(413, "The body is larger than the service reads."),
        problem(415, "The body is not YAML."),
        problem(
            422,
            "The tree is not valid (every error has its field path), or it has no leaf "
            "for the queue of a job that runs or waits.",
        ),
        problem(
            429,
            "The token runs as many simulations as it may at once "
            "(max_simulations_per_token); Retry-After says when to try again.",
        ),
    ),
)
async def simulate_quota_tree(request: web.Request, *, dry_run: str, horizon: int) -> web.Response:
    """``POST /api/v1/quota-tree?dryRun=Simulate``: the proposed tree against the live queue."""
    svc = _svc(request)
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


@TABLE.route(
    "GET",
    "/api/v1/clusters",
    "listClusters",
    "Member clusters: labels, health, GPUs total, used and free, per virtual cluster",
    "clusters",
    replies=(Reply(200, "The member clusters.", schemas.ClusterList), UNAUTHORIZED),
)
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
                topology=cluster_nodes(cluster),
            )
        )
    return schemas.json_response(schemas.ClusterList(items=items))


def cluster_nodes(cluster: MemberClusterModel) -> schemas.ClusterNodes | None:
    """A member's nodes, GPU products and VC shortfalls, when its cells are built from
    its nodes (None otherwise)."""
    if not cluster.spec.built:
        return None
    nodes = set(cluster.cell_config().nodes())
    gpus: dict[str, list[int]] = {}
    for node in cluster.topology_nodes([]):
        if node.name not in nodes:
            continue
        for product, count in topology.gpu_sets(node):
            seen = gpus.setdefault(product, [0, 0])
            seen[0] += count
            seen[1] += 1
    return schemas.ClusterNodes(
        nodes=len(nodes),
        gpu_types=[
            schemas.GpuTypeCount(product=product, gpus=count, nodes=n)
            for product, (count, n) in sorted(gpus.items())
        ],
        shortfalls=[
            schemas.VcShortfall(vc=s.vc, path=s.path, asked=s.asked, held=s.held, reason=s.reason)
            for s in cluster.shortfalls()
        ],
    )


# Service ----------------------------------------------------------------------------------


@TABLE.route(
    "GET",
    "/healthz",
    "liveness",
    "Liveness: the process answers",
    "service",
    access="open",
    replies=(Reply(200, "Alive.", schemas.Liveness),),
)
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


@TABLE.route(
    "GET",
    "/readyz",
    "readiness",
    "Readiness: the service can take requests",
    "service",
    access="open",
    replies=(
        Reply(200, "Ready.", schemas.Readiness),
        Reply(503, "Not ready; the checks say why.", schemas.Readiness),
    ),
)
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


@TABLE.route(
    "GET",
    "/api/v1/openapi.json",
    "openapi",
    "This OpenAPI document",
    "service",
    access="open",
    replies=(Reply(200, "The OpenAPI 3.1 document.", dict[str, Any]),),
)
async def openapi_json(request: web.Request) -> web.Response:
    return web.json_response(request.app[keys.OPENAPI])


#: Every route the service serves (the UI's pages and ``/metrics`` aside), as declared.
ROUTES: Final[tuple[Route, ...]] = (*TABLE, *admin_routes.TABLE, *live.TABLE)


def route(operation_id: str) -> Route:
    """The route with this operation id (KeyError if none)."""
    for r in ROUTES:
        if r.operation_id == operation_id:
            return r
    raise KeyError(operation_id)


def add_routes(app: web.Application) -> None:
    """Serve every route of :data:`ROUTES`, and its OpenAPI document."""
    app[keys.OPENAPI] = openapi.openapi_document(ROUTES)
    app[keys.ROUTE_TABLE] = routing.add_routes(app.router, ROUTES)
