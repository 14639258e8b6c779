"""``GET /metrics`` in the Prometheus text format, and a span per HTTP request.

Theory of operation: the application's :class:`fleet.service.telemetry.Telemetry`
holds a Prometheus registry that its OpenTelemetry Prometheus exporter
feeds; this handler writes it out.  The route is open (like ``/healthz``),
plain text, and kept out of the OpenAPI document, which describes the JSON
API.

:func:`tracing_middleware` is the first middleware: a server span per
request, named ``METHOD /route/{template}``, continuing the caller's trace
when a W3C ``traceparent`` header is sent, with the HTTP semantic-convention
attributes (method, route, status code); a 5xx answer or an exception marks it
as an error.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from prometheus_client import CONTENT_TYPE_LATEST

from fleet.api.routing import Handler
from fleet.service.telemetry import Telemetry

TELEMETRY: Final = web.AppKey("telemetry", Telemetry)


async def metrics(request: web.Request) -> web.Response:
    body = request.app[TELEMETRY].prometheus_text()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def add_route(app: web.Application) -> None:
    app.router.add_get("/metrics", metrics)


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return request.path if resource is None else resource.canonical


@web.middleware
async def tracing_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    telemetry = request.app.get(TELEMETRY)
    if telemetry is None:
        return await handler(request)
    route = _route(request)
    with telemetry.tracer.start_as_current_span(
        f"{request.method} {route}",
        context=propagate.extract(dict(request.headers)),
        kind=SpanKind.SERVER,
        attributes={
            "http.request.method": request.method,
            "http.route": route,
            "url.path": request.path,
            "url.scheme": request.scheme,
        },
        record_exception=True,
        set_status_on_exception=True,
    ) as span:
        try:
            response = await handler(request)
        except web.HTTPException as e:
            _status(span, e.status)
            raise
        _status(span, response.status)
        return response


def _status(span: trace.Span, status: int) -> None:
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))
