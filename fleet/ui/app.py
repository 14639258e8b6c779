"""Mounting the dashboard at ``/ui/`` on the service's own application.

Theory of operation: :func:`setup` adds the page routes of
:mod:`fleet.ui.views`, the static files (``fleet.css``, ``fleet.js``) and the
event proxy to an aiohttp application, with a Jinja2 environment that
escapes everything it renders.  Every answer under ``/ui/`` carries a
content security policy that allows scripts, styles and connections from
the dashboard's own origin only (no inline script or style, no frames);
static files are addressed by a digest of their content (``?v=``) and
cached for a year, pages are never cached.  ``/ui/events`` relays the API's
server-sent-event stream with the caller's token (a browser's
``EventSource`` cannot send an ``Authorization`` header), and a version the
API refuses as a 400 of its own; those relays are closed when the service
shuts down.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import importlib.resources
from collections.abc import Awaitable, Callable
from typing import Final

import aiohttp_jinja2
import jinja2
from aiohttp import web

from fleet.ui import client, present, views

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
#: Static files and their media types.
STATIC: Final = {
    "fleet.css": "text/css",
    "fleet.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}
#: Cache lifetime of a static file addressed by its digest (seconds).
STATIC_MAX_AGE: Final = 365 * 24 * 3600

_RELAYS: Final = web.AppKey("ui-relays", set[asyncio.Task[None]])
_FILES: Final = web.AppKey("ui-static", dict[str, tuple[bytes, str]])

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _static_files() -> dict[str, tuple[bytes, str]]:
    """name -> (content, digest)."""
    root = importlib.resources.files("fleet.ui") / "static"
    out = {}
    for name in STATIC:
        data = (root / name).read_bytes()
        out[name] = (data, hashlib.sha256(data).hexdigest()[:16])
    return out


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The content security policy and friends on every ``/ui/`` answer."""
    try:
        response = await handler(request)
    except web.HTTPException as e:
        if request.path.startswith("/ui"):
            e.headers["Content-Security-Policy"] = CSP
        raise
    if request.path.startswith("/ui"):
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
    return response


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    found = request.app[_FILES].get(name)
    if found is None:
        raise web.HTTPNotFound(text=f"no static file {name[:60]}")
    data, digest = found
    versioned = request.query.get("v") == digest
    cache = f"public, max-age={STATIC_MAX_AGE}, immutable" if versioned else "no-cache"
    etag = f'"{digest}"'
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers={"ETag": etag, "Cache-Control": cache})
    return web.Response(
        body=data,
        content_type=STATIC[name],
        charset="utf-8",
        headers={"Cache-Control": cache, "ETag": etag},
    )


async def events(request: web.Request) -> web.StreamResponse:
    """``/ui/events``: the API's change stream, relayed with the caller's token."""
    api = client.Api(request)
    try:
        last = request.headers.get("Last-Event-ID") or request.query.get("after")
        upstream = await api.stream("/api/v1/events", last)
    except client.ApiProblem as e:
        if e.status == 400:  # the API read the version and refused it
            detail = "after (or Last-Event-ID) is not a view version"
            raise web.HTTPBadRequest(text=detail) from None
        if e.status == 429:  # the token holds as many streams as it may
            raise web.HTTPTooManyRequests() from None
        raise web.HTTPUnauthorized() if e.status == 401 else web.HTTPBadGateway() from None
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    task = asyncio.current_task()
    relays = request.app[_RELAYS]
    if task is not None:
        relays.add(task)
    try:
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        upstream.release()
        if task is not None:
            relays.discard(task)
    return response


async def _close(app: web.Application) -> None:
    relays = app[_RELAYS]
    for task in sorted(relays, key=id):
        task.cancel()


async def _cleanup(app: web.Application) -> None:
    await client.close(app)


async def _favicon(request: web.Request) -> web.StreamResponse:
    digest = request.app[_FILES]["favicon.svg"][1]
    raise web.HTTPMovedPermanently(f"/ui/static/favicon.svg?v={digest}")


async def _index_redirect(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/")


def setup(app: web.Application, site: client.Site) -> None:
    """Serve the dashboard at ``/ui/`` from ``app``, whose server answers ``site``'s questions."""
    files = _static_files()
    app[_FILES] = files
    app[client.SITE] = site
    app[_RELAYS] = set()
    app[client.SESSIONS] = client.Sessions()
    env = aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("fleet.ui", "templates"),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        undefined=jinja2.StrictUndefined,
    )
    env.globals["static"] = lambda name: f"/ui/static/{name}?v={files[name][1]}"
    # an API estimatedStart as a START cell, at the moment the page is made
    env.globals["start_of"] = lambda e: present.start(e, datetime.datetime.now(datetime.UTC))
    app.middlewares.append(security_headers)
    app.on_shutdown.append(_close)
    app.on_cleanup.append(_cleanup)
    r = app.router
    r.add_get("/ui", _index_redirect)
    r.add_get("/favicon.ico", _favicon)
    r.add_get("/ui/", views.tree, name="ui-tree")
    r.add_get("/ui/login", views.login_form)
    r.add_post("/ui/login", views.login)
    r.add_post("/ui/logout", views.logout)
    r.add_get("/ui/static/{name}", static)
    r.add_get("/ui/events", events)
    r.add_get("/ui/queues/{name}", views.queue)
    r.add_post("/ui/queues/{name}/quota", views.quota_edit)
    r.add_get("/ui/jobs", views.jobs)
    r.add_get("/ui/jobs/{namespace}/{name}", views.job)
    r.add_post("/ui/jobs/{namespace}/{name}/cancel", views.cancel)
    r.add_get("/ui/clusters", views.clusters)
    r.add_get("/ui/clusters/{name}", views.cluster)
    r.add_post("/ui/clusters/{name}/nodes/{node}/health", views.node_health)
