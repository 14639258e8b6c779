"""Read routes for dashboards: who is asking, a stream of changes, cell maps, submitted documents.

Theory of operation:

* ``GET /api/v1/whoami`` answers the caller's token name, role and queues, so
  a client shows an admin's forms and a team's Cancel buttons only to them.
* ``GET /api/v1/events`` is a server-sent-events stream (``text/event-stream``)
  of the views the scheduler loop publishes after each iteration
  (:attr:`fleet.service.loop.LoopView.version`): one ``view`` event per view the
  client has not seen, whose data (:class:`~fleet.api.live_schemas.ViewChange`)
  names the jobs that changed since.  The first event comes at once; a client
  that reconnects sends ``Last-Event-ID`` (or ``?after=``) and gets what it
  missed, or ``complete: false`` when the loop no longer remembers that far
  back.  A comment line every :data:`HEARTBEAT` seconds keeps proxies from
  closing an idle stream; the service closes every stream when it shuts down.
  One token holds at most ``max_streams_per_token`` streams at once
  (:mod:`fleet.api.limits`: 429 with ``Retry-After`` beyond); a stream's
  slot is given back when it ends, the client's going away included.
* ``GET /api/v1/clusters/{name}/cells`` is the cell map: every node of a member
  (from its cell config, in config order) with its GPUs and the job that holds
  each, read from the jobs the database records as holding cells there, and
  the nodes marked bad.  Nodes are paged (``limit``, ``continue``).
* ``GET /api/v1/jobs/{namespace}/{name}/submitted`` answers the
  PropagationPolicy and the job as they were submitted (YAML); a team
  token sees those of its own queues only, like the job's events.

Each handler carries its route's one declaration (:mod:`fleet.api.routing`):
``after`` and ``limit`` reach it read and within bounds.
"""

from __future__ import annotations

import asyncio
from typing import Final

import yaml
from aiohttp import web

from fleet.api import auth, keys, live_schemas, params, schemas
from fleet.api.problems import ProblemError, not_found
from fleet.api.routing import (
    BAD_PAGE,
    CONTINUE,
    JOB_PATH,
    UNAUTHORIZED,
    Reply,
    RouteTable,
    path,
    problem,
    query,
)
from fleet.core.cells.topology import Topology
from fleet.core.digits import MAX_VALUE, parse_digits
from fleet.core.jobs import Mode
from fleet.core.lifecycle import JobState
from fleet.core.view import LoopView
from fleet.service.loop import SchedulerLoop
from fleet.store import admin as admin_rows
from fleet.store import jobs as job_rows

#: Seconds between two keep-alive comments of an idle event stream.
HEARTBEAT: Final = 15.0
TABLE: Final = RouteTable()

_STREAMS: Final = web.AppKey("live-streams", set[asyncio.Task[None]])


# Who is asking ---------------------------------------------------------------------------


@TABLE.route(
    "GET",
    "/api/v1/whoami",
    "whoami",
    "The caller: its token's name, role and queues",
    "service",
    replies=(Reply(200, "The caller.", live_schemas.WhoAmI), UNAUTHORIZED),
)
async def whoami(request: web.Request) -> web.Response:
    who = auth.caller(request)
    body = live_schemas.WhoAmI(
        name=who.name,
        role=who.role,
        queues=sorted(who.queues),
        namespaces=auth.namespaces_of(who, request.app[keys.SERVICE].tree),
        tokens_required=request.app[keys.TOKENS].configured,
    )
    return schemas.json_response(body)


# The change stream -----------------------------------------------------------------------


def _change(view: LoopView, after: int) -> live_schemas.ViewChange:
    """What changed after version ``after`` (0: the client has nothing; -1: nothing usable)."""
    recent = view.recent
    oldest = recent[0][0] if recent else view.version + 1
    complete = after == 0 or (0 < after <= view.version and after + 1 >= oldest)
    jobs = sorted({job for version, changed in recent if version > after for job in changed})
    return live_schemas.ViewChange(
        version=view.version, time=view.time, jobs=jobs if after > 0 else [], complete=complete
    )


@TABLE.route(
    "GET",
    "/api/v1/events",
    "watchViews",
    "A server-sent-events stream of the scheduler's published views and the jobs changed",
    "service",
    parameters=(
        query(
            "after",
            "The last view version the client has (Last-Event-ID takes precedence); "
            "0 or absent: only the current version.",
            int,
            low=0,
            high=MAX_VALUE,
            header="Last-Event-ID",
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
        problem(400, "after (or Last-Event-ID) is not a version."),
        UNAUTHORIZED,
        problem(
            429,
            "The token holds as many event streams open as it may "
            "(max_streams_per_token); Retry-After says when to try again.",
        ),
    ),
)
async def events(request: web.Request, *, after: int | None) -> web.StreamResponse:
    """``GET /api/v1/events``: the published views as server-sent events (or one, as JSON).

    ``after`` is ``Last-Event-ID`` when sent, else the query parameter (absent: 0)."""
    after = after or 0
    loop = request.app[keys.SERVICE].loop
    if after > loop.view.version:  # a version of an earlier run of the service
        after = -1
    if "text/event-stream" not in request.headers.get("Accept", ""):
        return schemas.json_response(_change(loop.view, after))
    with request.app[keys.STREAM_SLOTS].take(auth.caller(request)):
        return await _stream(request, loop, after)


async def _stream(request: web.Request, loop: SchedulerLoop, after: int) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    task = asyncio.current_task()
    streams = request.app[_STREAMS]
    if task is not None:
        streams.add(task)
    try:
        await response.write(b"retry: 2000\n\n")
        first = True
        while True:
            view = await loop.next_view(after, 0.0 if first else HEARTBEAT)
            first = False
            if view.version <= after:
                await response.write(b": keep-alive\n\n")
                continue
            change = _change(view, after)
            data = change.model_dump_json(by_alias=True)
            await response.write(f"id: {view.version}\nevent: view\ndata: {data}\n\n".encode())
            after = view.version
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        if task is not None:
            streams.discard(task)
    return response


async def _close_streams(app: web.Application) -> None:
    streams = app[_STREAMS]
    for task in sorted(streams, key=id):
        task.cancel()


# Cell maps -------------------------------------------------------------------------------


def _topology(request: web.Request, name: str) -> Topology:
    svc = request.app[keys.SERVICE]
    cluster = next((c for c in svc.clusters if c.name == name), None)
    if cluster is None or name not in svc.loop.members:
        raise ProblemError(not_found(f"no member cluster {name[:60]!r}"))
    return Topology(cluster.cell_config())


def _start(raw: str | None) -> int:
    """The first node of the page: the number of a ``node:N`` continue token (0: none)."""
    if raw is None:
        return 0
    kind, _, number = raw.partition(":")
    start = parse_digits(number)
    if kind != "node" or start is None:
        raise params.bad_continue()
    return start


@TABLE.route(
    "GET",
    "/api/v1/clusters/{name}/cells",
    "getClusterCells",
    "The cell map of a member cluster: every node's GPUs and the job holding each",
    "clusters",
    parameters=(
        path("name", "The member cluster."),
        query("limit", "Nodes per page.", int, default=500, low=1, high=2000),
        CONTINUE,
    ),
    replies=(
        Reply(200, "A page of nodes with their GPU cells.", live_schemas.ClusterCells),
        BAD_PAGE,
        UNAUTHORIZED,
        problem(404, "No such member cluster."),
    ),
)
async def cluster_cells(
    request: web.Request, *, name: str, limit: int, continue_: str | None
) -> web.Response:
    """``GET /api/v1/clusters/{name}/cells``: every node's GPUs and who holds them."""
    topo = _topology(request, name)
    start = _start(continue_)
    svc = request.app[keys.SERVICE]
    async with svc.db.read() as session:
        rows = await job_rows.holding_in(session, name)
        bad = {b.node: b.reason for b in await admin_rows.bad_nodes(session) if b.cluster == name}
    held: dict[tuple[str, int], live_schemas.GpuCell] = {}
    for row in rows:
        for unit in row.units:
            for _pod, node, gpus in unit["pods"]:
                for gpu in gpus:
                    held[node, gpu] = live_schemas.GpuCell(
                        index=gpu,
                        job=f"{row.namespace}/{row.name}",
                        queue=row.queue,
                        priority=row.priority,
                        priority_class=row.priority_class,
                        mode=None if row.mode is None else Mode(row.mode),
                        state=JobState(row.state),
                    )
    nodes: list[live_schemas.NodeCells] = []
    free = whole = fragmented = 0
    for node, node_cells in topo.nodes.items():
        leaves = sorted(
            (leaf for cell in node_cells for leaf in cell.leaves),
            key=lambda leaf: leaf.leaf_index or 0,
        )
        cells = [
            held.get((node, leaf.leaf_index or 0))
            or live_schemas.GpuCell(index=leaf.leaf_index or 0)
            for leaf in leaves
        ]
        healthy = node not in bad
        free_here = sum(1 for c in cells if c.job is None) if healthy else 0
        free += free_here
        if healthy and free_here == len(cells):
            whole += 1
        elif healthy:
            fragmented += free_here
        nodes.append(
            live_schemas.NodeCells(
                name=node,
                gpu_type=leaves[0].ctype.leaf_type if leaves else "",
                healthy=healthy,
                reason=bad.get(node, ""),
                cells=cells,
            )
        )
    page = nodes[start : start + limit]
    token = f"node:{start + limit}" if start + limit < len(nodes) else None
    body = live_schemas.ClusterCells(
        name=name,
        nodes=page,
        total_nodes=len(nodes),
        free_gpus=free,
        whole_free_nodes=whole,
        fragmented_gpus=fragmented,
        continue_=token,
    )
    return schemas.json_response(body)


# Submitted documents ---------------------------------------------------------------------


@TABLE.route(
    "GET",
    "/api/v1/jobs/{namespace}/{name}/submitted",
    "getSubmittedJob",
    "The PropagationPolicy and the job as submitted, as YAML",
    "jobs",
    access="team",
    description="A team token reads those of its own queues' jobs only (like the events of a job).",
    parameters=JOB_PATH,
    replies=(
        Reply(200, "The documents.", str, ("application/yaml",)),
        UNAUTHORIZED,
        problem(403, "A team token asks for a job outside its queues."),
        problem(404, "No such job."),
    ),
)
async def submitted(request: web.Request, *, namespace: str, name: str) -> web.Response:
    """``GET /api/v1/jobs/{namespace}/{name}/submitted``: the policy and the job as YAML."""
    svc = request.app[keys.SERVICE]
    async with svc.db.read() as session:
        row = await job_rows.by_name(session, namespace, name)
    if row is None:
        raise ProblemError(not_found(f"no job {namespace[:60]}/{name[:60]}"))
    auth.require_namespaces(request, svc.tree, [(f"job {namespace}/{name}", row.namespace)])
    documents = [d for d in (row.policy, row.manifest) if d is not None]
    text = yaml.safe_dump_all(documents, sort_keys=False)
    return web.Response(text=text, content_type="application/yaml")


def setup(app: web.Application) -> None:
    """Keep track of open event streams, and close them when the service shuts down."""
    app[_STREAMS] = set()
    app.on_shutdown.append(_close_streams)
