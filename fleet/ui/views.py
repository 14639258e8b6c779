"""The dashboard's pages: the overview (summary, charts over time, quota tree), queues, jobs,
clusters with their cell maps, admin forms.

Theory of operation: every handler reads what it shows from the public API
(:class:`fleet.ui.client.Api`, with the caller's token) and renders one
Jinja2 template on the server; the pages work without script, and
``fleet.js`` only adds live updates and the jobs page's search box.  Every
page but the login and the quota form opens with a summary header (members'
GPUs, leaves' jobs, the last sampled p95 wait); the overview draws the
charts of ``GET /api/v1/history`` over the window asked for (``?window=``)
as inline SVG (:func:`fleet.ui.present.chart`), ending at the service's own
time.  Lists are paged on the server (the
API's ``limit``/``continue``, or slices of one answer), so no page carries
every job.  A form posts to the dashboard, which makes the same API call a
client would (the API validates, authorises and audits it) and shows the
API's answer: the dry run of a quota change before it is saved, a 403 for
a token that may not, every field error of a 422.  A missing or refused
token leads to the login form; a POST must come from the dashboard's own
origin (SameSite cookie and an Origin check, the server's own; the cookie
is Secure whenever the client reached the server over TLS, as the server
tells: see :class:`fleet.ui.client.Site`).
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote, urlencode

import aiohttp_jinja2
from aiohttp import web

from fleet.core.digits import parse_digits
from fleet.service import columns
from fleet.ui import present
from fleet.ui.client import COOKIE, SITE, Api, ApiProblem, path

#: Rows per page.
TREE_PAGE: Final = 200
PENDING_PAGE: Final = 50
JOBS_PAGE: Final = 50
NODES_PAGE: Final = 200
#: The highest page number a link may ask for.
MAX_PAGE: Final = 999_999
#: Job details fetched at once for a page of pending jobs (their submission times).
DETAIL_CONCURRENCY: Final = 8
STATES: Final = (
    "Queued",
    "Admitted",
    "Dispatched",
    "Running",
    "Succeeded",
    "Failed",
    "Preempted",
    "Cancelled",
)
TERMINAL: Final = frozenset({"Succeeded", "Failed", "Cancelled"})
#: Seconds back the summary header looks for the last sample of the p95 wait.
SUMMARY_WAIT_SINCE: Final = 3600
#: The jobs page's columns, in the words every Fleet table uses: the CLI's, then some
#: of its wide ones.
JOB_COLUMNS: Final = (*columns.JOB_COLUMNS, "REASON", "RUN TIME", "PRIORITY", "KIND")
#: The charts of the overview: (id, series, title, with the whole fleet's line).
CHARTS: Final = (
    ("gpus", "GPUs used per queue", False),
    ("pending", "Pending jobs per queue (queue depth)", False),
    ("wait", "Wait: p95 of the last hour's admissions, per queue and overall", True),
)
#: Resources offered on a quota form even when the node names none.
FORM_RESOURCES: Final = ("nvidia.com/gpu", "cpu", "memory", "kube-queue/max-jobs")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _page(request: web.Request, name: str = "page") -> int:
    """The page number asked for; anything but 1 to 999999 in ASCII digits is page 1."""
    return parse_digits(request.query.get(name, "1"), low=1, high=MAX_PAGE) or 1


def _url(base: str, **params: Any) -> str:
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return base + ("?" + urlencode(kept) if kept else "")


async def _me(api: Api) -> dict[str, Any]:
    """The caller (``GET /api/v1/whoami``) and, as ``view``, the scheduler's view version now,
    from which the page's script follows the changes."""
    me, view = await asyncio.gather(api.json("/api/v1/whoami"), api.json("/api/v1/events"))
    found: dict[str, Any] = {**me, "view": view["version"]}
    return found


async def _summary(
    api: Api, queues: list[dict[str, Any]] | None = None
) -> tuple[present.Summary, dict[str, str]]:
    """The summary header (the members' GPUs, the leaves' jobs and the last sampled p95
    wait) and the leaves' colours, the same on every page that has them (the queues are
    read again unless the page has them)."""
    clusters, found, wait = await asyncio.gather(
        api.json("/api/v1/clusters"),
        api.json("/api/v1/queues") if queues is None else _given(queues),
        api.json("/api/v1/history", {"series": "wait", "since": str(SUMMARY_WAIT_SINCE)}),
    )
    items = found["items"] if isinstance(found, dict) else found
    points = wait.get("points") or []
    colours = present.vc_classes(q["name"] for q in items if q.get("leaf"))
    return present.summary(clusters["items"], items, points[-1] if points else None), colours


async def _given(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return value


def _may_act(me: Mapping[str, Any], namespace: str) -> bool:
    return me.get("role") == "admin" or namespace in me.get("namespaces", [])


def _login_redirect(request: web.Request) -> web.HTTPFound:
    return web.HTTPFound(_url("/ui/login", next=request.path_qs))


async def _render(
    request: web.Request, template: str, context: dict[str, Any], *, status: int = 200
) -> web.Response:
    context.setdefault("message", request.query.get("message", ""))
    response = aiohttp_jinja2.render_template(template, request, context, status=status)
    response.headers["Cache-Control"] = "no-store"
    return response


async def _problem_page(request: web.Request, problem: ApiProblem, me: Any = None) -> web.Response:
    if problem.status == 401:
        raise _login_redirect(request)
    status = problem.status if 400 <= problem.status < 600 else 502
    context = {"me": me, "problem": problem, "title": f"Error {problem.status}"}
    return await _render(request, "error.html", context, status=status)


def _same_origin(request: web.Request) -> None:
    origin = request.headers.get("Origin")
    if origin is None or not request.app[SITE].same_origin(request, origin):
        raise web.HTTPForbidden(text="forms are accepted from the dashboard's own pages only")


# Login -----------------------------------------------------------------------------------


async def login_form(request: web.Request) -> web.Response:
    return await _render(
        request,
        "login.html",
        {"me": None, "title": "Log in", "next": _safe_next(request.query.get("next")), "error": ""},
    )


def _safe_next(raw: str | None) -> str:
    if raw and raw.startswith("/ui/") and not raw.startswith("//"):
        return raw
    return "/ui/"


async def login(request: web.Request) -> web.StreamResponse:
    _same_origin(request)
    form = await request.post()
    token = str(form.get("token", "")).strip()
    target = _safe_next(str(form.get("next", "")))
    try:
        me = await _me(Api(request, token))
    except ApiProblem as e:
        error = "the token was refused" if e.status == 401 else e.detail
        context = {"me": None, "title": "Log in", "next": target, "error": error}
        return await _render(request, "login.html", context, status=401 if e.status == 401 else 200)
    response = web.HTTPSeeOther(target)
    if me.get("tokensRequired"):
        response.set_cookie(
            COOKIE,
            token,
            httponly=True,
            samesite="Strict",
            path="/ui/",
            secure=request.app[SITE].secure(request),
        )
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    _same_origin(request)
    response = web.HTTPSeeOther("/ui/login")
    response.del_cookie(COOKIE, path="/ui/")
    raise response


# Quota tree ------------------------------------------------------------------------------


async def tree(request: web.Request) -> web.Response:
    api = Api(request)
    window = request.query.get("window", "6h")
    if window not in present.WINDOWS:
        window = "6h"
    since = str(present.WINDOWS[window])
    try:
        me, queues, tree_doc, *series = await asyncio.gather(
            _me(api),
            api.json("/api/v1/queues"),
            api.json("/api/v1/quota-tree"),
            *(api.json("/api/v1/history", {"series": c, "since": since}) for c, _, _ in CHARTS),
        )
        summary, colours = await _summary(api, queues["items"])
    except ApiProblem as e:
        return await _problem_page(request, e)
    nodes = queues["items"]
    # The service's time (its clock may not be this machine's): where the series end.
    first = present.parse_time(series[0].get("since"))
    now = _now() if first is None else first + datetime.timedelta(seconds=present.WINDOWS[window])
    charts = [
        present.chart(
            chart_id,
            title,
            found,
            colours,
            now=now,
            window=present.WINDOWS[window],
            fleet_line=fleet_line,
        )
        for (chart_id, title, fleet_line), found in zip(CHARTS, series, strict=True)
    ]
    status = tree_doc.get("status") or {}
    depth = present.depths(nodes)
    needle = request.query.get("q", "").strip()
    shown = [n for n in nodes if needle.lower() in n["name"].lower()] if needle else nodes
    page = _page(request)
    start = (page - 1) * TREE_PAGE
    rows = [
        {
            "node": n,
            "depth": depth.get(n["name"], 0),
            "bars": present.bars(n),
            "over": any(b.over_max for b in present.bars(n)),
        }
        for n in shown[start : start + TREE_PAGE]
    ]
    context = {
        "me": me,
        "title": "Quota tree",
        "rows": rows,
        "summary": summary,
        "charts": charts,
        "window": window,
        "windows": list(present.WINDOWS),
        "interval": series[0].get("interval", 0),
        "q": needle,
        "total": len(shown),
        "page": page,
        "prev": _url("/ui/", q=needle, page=page - 1, window=window) if page > 1 else None,
        "next": _url("/ui/", q=needle, page=page + 1, window=window)
        if start + TREE_PAGE < len(shown)
        else None,
        "vc_class": lambda q: colours.get(q) or present.vc_class(q),
        "watch": "any",
        "overpromised": status.get("overpromised") or [],
        "auto": status.get("capacity") == "auto",
        "held": status.get("held") or {},
    }
    return await _render(request, "tree.html", context)


# Queues ----------------------------------------------------------------------------------


async def _submitted_times(api: Api, jobs: list[str]) -> dict[str, str]:
    """namespace/name -> submittedAt of each job of one page (a few at a time)."""
    limit = asyncio.Semaphore(DETAIL_CONCURRENCY)

    async def one(key: str) -> tuple[str, str]:
        namespace, _, name = key.partition("/")
        async with limit:
            try:
                detail = await api.json("/api/v1/jobs/" + path(namespace, name))
            except ApiProblem:
                return key, ""
        return key, str(detail.get("submittedAt", ""))

    return dict(await asyncio.gather(*(one(j) for j in jobs)))


async def queue(request: web.Request) -> web.Response:
    api = Api(request)
    name = request.match_info["name"]
    try:
        me = await _me(api)
        node = await api.json("/api/v1/queues/" + path(name))
        running_params = {"queue": name, "limit": str(JOBS_PAGE)}
        state = request.query.get("state", "Running")
        if state not in STATES:
            state = "Running"
        running_params["state"] = state
        if request.query.get("continue"):
            running_params["continue"] = request.query["continue"]
        running = await api.json("/api/v1/jobs", running_params) if node["leaf"] else None
        summary, _ = await _summary(api)
    except ApiProblem as e:
        return await _problem_page(request, e)
    pending = node["pending"]
    page = _page(request)
    start = (page - 1) * PENDING_PAGE
    shown = pending[start : start + PENDING_PAGE]
    times = await _submitted_times(api, [p["job"] for p in shown])
    now = _now()
    base = "/ui/queues/" + path(name)
    context = {
        "me": me,
        "title": f"Queue {name}",
        "summary": summary,
        "node": node,
        "bars": present.bars(node),
        "pending": [
            {**p, "waited": present.waited(times.get(p["job"]), now), "since": times.get(p["job"])}
            for p in shown
        ],
        "pending_total": len(pending),
        "prev": _url(base, page=page - 1, state=state) if page > 1 else None,
        "next": _url(base, page=page + 1, state=state)
        if start + PENDING_PAGE < len(pending)
        else None,
        "running": running,
        "state": state,
        "states": STATES,
        "more_running": _url(base, page=page, state=state, **{"continue": running["continue"]})
        if running and running.get("continue")
        else None,
        "vc_class": present.vc_class,
        "job_url": _job_url,
        "short_time": present.short_time,
        "watch": "any",
        # Shown to every caller: the API decides (a team token's change is refused, 403).
        "form": _quota_form(node),
    }
    return await _render(request, "queue.html", context)


def _job_url(key: str) -> str:
    namespace, _, name = key.partition("/")
    return "/ui/jobs/" + path(namespace, name)


def _quota_form(
    node: Mapping[str, Any], values: Mapping[str, str] | None = None
) -> list[dict[str, str]]:
    """One row per resource: its current min and max, or the values of a posted form."""
    names = present.resources(node.get("min"), node.get("max"))
    names += [r for r in FORM_RESOURCES if r not in names]
    rows = []
    for r in names:
        rows.append(
            {
                "resource": r,
                "min": (values or {}).get(f"min:{r}", (node.get("min") or {}).get(r, "")),
                "max": (values or {}).get(f"max:{r}", (node.get("max") or {}).get(r, "")),
            }
        )
    return rows


def _patch(node: Mapping[str, Any], form: Mapping[str, str]) -> dict[str, Any]:
    """The merge patch of a quota form: changed amounts, and null for a cleared one."""
    patch: dict[str, Any] = {}
    for kind in ("min", "max"):
        old: Mapping[str, str] = node.get(kind) or {}
        changes: dict[str, str | None] = {}
        for key, value in form.items():
            if not key.startswith(kind + ":"):
                continue
            resource, value = key[len(kind) + 1 :], value.strip()
            if value == old.get(resource, ""):
                continue
            changes[resource] = value or None
        if changes:
            patch[kind] = changes
    return patch


def _canonical(patch: Mapping[str, Any]) -> str:
    return json.dumps(patch, sort_keys=True, separators=(",", ":"))


async def quota_edit(request: web.Request) -> web.Response:
    """POST a quota form: ``preview`` shows the dry run, ``save`` applies the change."""
    _same_origin(request)
    api = Api(request)
    name = request.match_info["name"]
    form = {k: str(v) for k, v in (await request.post()).items()}
    try:
        me = await _me(api)
        node = await api.json("/api/v1/queues/" + path(name))
    except ApiProblem as e:
        return await _problem_page(request, e)
    patch = _patch(node, form)
    # Save only what the person saw previewed: a form changed since its dry run is
    # previewed again instead.
    save = form.get("action") == "save" and form.get("previewed") == _canonical(patch)
    context: dict[str, Any] = {
        "me": me,
        "title": f"Change quota of {name}",
        "node": node,
        "form": _quota_form(node, form),
        "patch": patch,
        "patch_text": json.dumps(patch, indent=2, sort_keys=True),
        "previewed": _canonical(patch),
        "change": None,
        "problem": None,
    }
    if not patch:
        context["problem"] = ApiProblem(422, {"detail": "nothing to change: no value differs"})
        return await _render(request, "quota_edit.html", context, status=422)
    url = "/api/v1/quota-tree/nodes/" + path(name)
    try:
        change = await api.send_json(
            "PATCH",
            url,
            patch,
            params=None if save else {"dryRun": "All"},
            content_type="application/merge-patch+json",
        )
    except ApiProblem as e:
        if e.status == 401:
            raise _login_redirect(request) from None
        context["problem"] = e
        return await _render(request, "quota_edit.html", context, status=e.status)
    if save:
        version = change.get("version")
        raise web.HTTPSeeOther(
            _url("/ui/queues/" + path(name), message=f"quota of {name} saved (version {version})")
        )
    context["change"] = change
    return await _render(request, "quota_edit.html", context)


# Jobs ------------------------------------------------------------------------------------


async def jobs(request: web.Request) -> web.Response:
    api = Api(request)
    filters = {
        k: request.query.get(k, "").strip() for k in ("queue", "state", "namespace", "cluster")
    }
    params = {k: v for k, v in filters.items() if v}
    params["limit"] = str(JOBS_PAGE)
    if request.query.get("continue"):
        params["continue"] = request.query["continue"]
    try:
        me = await _me(api)
        summary, colours = await _summary(api)
        found = await api.json("/api/v1/jobs", params)
    except ApiProblem as e:
        if e.status == 400:
            found = {"items": []}
            me = await _me(api)
            summary, colours = await _summary(api)
            error = e.detail
        else:
            return await _problem_page(request, e)
    else:
        error = ""
    now = _now()
    context = {
        "me": me,
        "title": "Jobs",
        "summary": summary,
        "columns": JOB_COLUMNS,
        "jobs": [
            {
                **j,
                "gpus": j.get("gpus", 0),
                "reason": j.get("reason"),
                "age": present.age(j.get("submittedAt"), now),
                "run_time": present.compact(j.get("runSeconds")),
            }
            for j in found["items"]
        ],
        "filters": filters,
        "states": STATES,
        "error": error,
        "next": _url("/ui/jobs", **filters, **{"continue": found["continue"]})
        if found.get("continue")
        else None,
        "first": _url("/ui/jobs", **filters) if request.query.get("continue") else None,
        "job_url": _job_url,
        "vc_class": lambda q: colours.get(q) or present.vc_class(q),
        "short_time": present.short_time,
        "watch": "any",
    }
    return await _render(request, "jobs.html", context)


async def job(request: web.Request) -> web.Response:
    api = Api(request)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    url = "/api/v1/jobs/" + path(namespace, name)
    try:
        me = await _me(api)
        detail = await api.json(url)
        summary, _ = await _summary(api)
    except ApiProblem as e:
        return await _problem_page(request, e)
    documents: str | None
    try:
        documents = await api.text(url + "/submitted")
    except ApiProblem as e:
        documents = None if e.status == 403 else f"# not available: {e.detail}"
    now = _now()
    context = {
        "me": me,
        "title": f"Job {namespace}/{name}",
        "summary": summary,
        "job": detail,
        "documents": documents,
        "events": [{**e, "at": present.short_time(e["time"])} for e in detail.get("events", [])],
        "waited": present.waited(detail.get("submittedAt"), now),
        "submitted": present.short_time(detail.get("submittedAt")),
        "may_cancel": _may_act(me, detail["namespace"]) and detail["state"] not in TERMINAL,
        "short_time": present.short_time,
        "vc_class": present.vc_class,
        "cancel_url": "/ui/jobs/" + path(namespace, name) + "/cancel",
        "watch": "job:" + f"{namespace}/{name}",
    }
    return await _render(request, "job.html", context)


async def cancel(request: web.Request) -> web.StreamResponse:
    _same_origin(request)
    api = Api(request)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    target = "/ui/jobs/" + path(namespace, name)
    try:
        await api.delete("/api/v1/jobs/" + path(namespace, name))
    except ApiProblem as e:
        return await _problem_page(request, e)
    raise web.HTTPSeeOther(_url(target, message=f"cancellation of {namespace}/{name} recorded"))


# Clusters --------------------------------------------------------------------------------


async def clusters(request: web.Request) -> web.Response:
    api = Api(request)
    try:
        me = await _me(api)
        items = (await api.json("/api/v1/clusters"))["items"]
        summary, colours = await _summary(api)
    except ApiProblem as e:
        return await _problem_page(request, e)
    context = {
        "me": me,
        "title": "Clusters",
        "summary": summary,
        "clusters": items,
        "vc_class": lambda q: colours.get(q) or present.vc_class(q),
        "watch": "any",
    }
    return await _render(request, "clusters.html", context)


async def cluster(request: web.Request) -> web.Response:
    api = Api(request)
    name = request.match_info["name"]
    params = {"limit": str(NODES_PAGE)}
    if request.query.get("continue"):
        params["continue"] = request.query["continue"]
    try:
        me = await _me(api)
        summary = next(
            (c for c in (await api.json("/api/v1/clusters"))["items"] if c["name"] == name), None
        )
        cells = await api.json("/api/v1/clusters/" + path(name) + "/cells", params)
        nodes = (await api.json("/api/v1/queues"))["items"]
        leaves = [n["name"] for n in nodes if n["leaf"]]
        fleet, _ = await _summary(api, nodes)
    except ApiProblem as e:
        return await _problem_page(request, e)
    queues = sorted(
        {c["queue"] for n in cells["nodes"] for c in n["cells"] if c.get("queue")}
        | {vc["name"] for vc in (summary or {}).get("virtualClusters", [])}
    )
    # Codes and colours from every leaf of the tree, so that a queue has the same ones on
    # every cluster (and its colour on every page that knows the leaves).
    codes = present.vc_codes([*leaves, *queues])
    colours = present.vc_classes([*leaves, *queues])
    jobs = present.map_jobs(cells["nodes"])
    base = "/ui/clusters/" + path(name)
    context = {
        "me": me,
        "title": f"Cluster {name}",
        "summary": fleet,
        "member": summary,
        "lent": present.lent(summary, cells["nodes"]) if summary else {},
        "cells": cells,
        "legend": [(q, codes[q], colours[q]) for q in queues],
        "jobs": sorted(jobs.values(), key=lambda j: (j.queue, j.job)),
        "shade": {j.job: j.shade for j in jobs.values()},
        "codes": codes,
        "vc_class": lambda q: colours.get(q) or present.vc_class(q),
        "job_url": _job_url,
        "health_url": lambda node: base + "/nodes/" + quote(node, safe="") + "/health",
        "next": _url(base, **{"continue": cells["continue"]}) if cells.get("continue") else None,
        "first": base if request.query.get("continue") else None,
        "watch": "any",
    }
    return await _render(request, "cluster.html", context)


async def node_health(request: web.Request) -> web.StreamResponse:
    _same_origin(request)
    api = Api(request)
    name, node = request.match_info["name"], request.match_info["node"]
    form = await request.post()
    healthy = form.get("healthy") == "true"
    reason = str(form.get("reason", "")).strip() or (
        "marked healthy from the dashboard" if healthy else "marked bad from the dashboard"
    )
    url = "/api/v1/clusters/" + path(name, "nodes", node, "health")
    try:
        await api.send_json("PUT", url, {"healthy": healthy, "reason": reason})
    except ApiProblem as e:
        return await _problem_page(request, e)
    word = "healthy" if healthy else "bad"
    raise web.HTTPSeeOther(_url("/ui/clusters/" + path(name), message=f"node {node} marked {word}"))
