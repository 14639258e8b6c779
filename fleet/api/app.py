"""The aiohttp application: ``create_app(settings)``.

Theory of operation (aiohttp as its maintainers use it): :func:`create_app`
builds the application from the settings alone; the service (database,
configuration, placers, members, scheduler loop) is opened and closed in the
application's ``cleanup_ctx``, so ``aiohttp_client`` tests and ``fleet serve``
start it the same way; so are, on the replica that schedules, the start
estimates and the history sampler (:mod:`fleet.service.history`).
Handlers live in :mod:`fleet.api.routes` (with
:mod:`fleet.api.admin_routes` and :mod:`fleet.api.live`), each beside its
route's one declaration (:mod:`fleet.api.routing`), and reach the service
through the typed keys of :mod:`fleet.api.keys`; every error is answered as
``application/problem+json`` by one middleware
(:func:`fleet.api.problems.problem_middleware`), and any exception a handler
did not expect becomes a logged 500 problem that leaks nothing, except that
a database that cannot be reached is a 503 with ``Retry-After``.  Before
any route runs, :func:`fleet.api.origins.host_and_origin` refuses foreign
``Host`` names without tokens and writes from foreign origins; followers
forward the leader's routes (:mod:`fleet.api.leader_proxy`); then
:mod:`fleet.api.auth` authenticates and audits.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from fleet.api import auth, keys, leader_proxy, live, metrics, origins, routes
from fleet.api.audit import AuditLog
from fleet.api.limits import Slots
from fleet.api.parse_workers import ParseWorkers
from fleet.api.problems import ProblemError, http_problem, problem_middleware, problem_response
from fleet.api.replicas import Verifier
from fleet.api.routing import Handler
from fleet.api.tokens import TokenStore
from fleet.clock import Clock, RealClock
from fleet.service import history, wiring
from fleet.service.settings import Settings
from fleet.service.telemetry import Telemetry
from fleet.sim import forecast
from fleet.sim.worker import ForecastWorker
from fleet.store.database import unavailable
from fleet.ui import app as ui
from fleet.ui import client as ui_client

log = logging.getLogger("fleet.api")


@web.middleware
async def last_resort(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A bug in a handler is a 500 problem without details (and a log line with them)."""
    try:
        return await handler(request)
    except (web.HTTPException, ProblemError):
        raise
    except Exception as e:
        if unavailable(e):
            log.warning(
                "database unavailable answering %s %s: %s", request.method, request.raw_path, e
            )
            detail = (
                "the database cannot be reached right now; retry later "
                "(a submission sent again is not stored twice)"
            )
            response = problem_response(http_problem(503, detail, instance=request.path))
            response.headers["Retry-After"] = "1"
            return response
        log.exception("unexpected error answering %s %s", request.method, request.raw_path)
        return problem_response(http_problem(500, None, instance=request.path))


def create_app(settings: Settings, *, clock: Clock | None = None) -> web.Application:
    """The Fleet API application; the service starts with it (see the module docstring)."""
    telemetry = Telemetry(otlp_endpoint=settings.otlp_endpoint)
    app = web.Application(
        middlewares=[
            metrics.tracing_middleware,  # a span per request
            problem_middleware,
            origins.host_and_origin,  # loopback names without tokens; writes from our origin
            leader_proxy.leader_proxy,  # followers forward the leader's routes (PostgreSQL)
            auth.access_middleware,
            last_resort,
        ],
        client_max_size=settings.max_body_bytes,
    )
    app[metrics.TELEMETRY] = telemetry
    app[keys.SETTINGS] = settings
    app[keys.TOKENS] = TokenStore(settings.tokens_file)
    if settings.replica_secret is not None:
        secret = settings.replica_secret.get_secret_value().encode("utf-8")
        app[keys.REPLICA_VERIFIER] = Verifier(secret)
    app[keys.STREAM_SLOTS] = Slots(
        "event streams", settings.max_streams_per_token, "max_streams_per_token"
    )
    app[keys.SIMULATION_SLOTS] = Slots(
        "quota-tree simulations", settings.max_simulations_per_token, "max_simulations_per_token"
    )
    if settings.tokens_file is None:
        log.warning(
            "no --tokens-file: every caller is treated as admin; listening on loopback only"
        )
    else:
        log.info(
            "bearer tokens from %s: %s",
            settings.tokens_file,
            ", ".join(app[keys.TOKENS].names()) or "none",
        )

    if settings.parse_processes > 0:  # they start at the first submission
        app[keys.PARSE_WORKERS] = ParseWorkers(settings.parse_processes)

    async def run_service(app: web.Application) -> AsyncIterator[None]:
        svc = await wiring.start(settings, clock or RealClock())
        app[keys.SERVICE] = svc
        app[keys.AUDIT] = audit = AuditLog(svc.db)
        worker = ForecastWorker() if settings.estimate_process else None
        estimator = forecast.Estimator(
            svc.db,
            svc.clock,
            lambda: (svc.tree_document, wiring.clusters_document(svc)),
            interval=settings.estimate_interval,
            changed=lambda: (svc.loop.view.queues, svc.loop.view.pending),
            worker=worker,
        )
        app[keys.ESTIMATOR] = estimator
        sampler = history.Sampler(
            svc.clock,
            lambda: svc.loop.view,
            lambda: svc.loop.db,  # the scheduling loop's: fenced by its term
            telemetry.recent_waits,
            interval=settings.history_interval,
            retention=settings.history_retention,
        )
        app[keys.SAMPLER] = sampler

        async def leading(now: bool) -> None:  # only the replica that schedules estimates
            if now:
                watch_service(telemetry, svc)
                if settings.estimate_interval > 0:
                    estimator.start()
                if settings.history_interval > 0:
                    sampler.start()
            else:
                await estimator.stop()
                await sampler.stop()

        svc.on_role.append(leading)
        if svc.scheduling:
            await leading(True)
        try:
            yield
        finally:
            await estimator.stop()
            await sampler.stop()
            if worker is not None:
                worker.close()
            if keys.PARSE_WORKERS in app:
                app[keys.PARSE_WORKERS].close()
            await audit.close()
            await wiring.stop(svc)
            telemetry.shutdown()

    app.cleanup_ctx.append(run_service)
    routes.add_routes(app)
    metrics.add_route(app)
    live.setup(app)
    leader_proxy.setup(app)
    ui.setup(app, ui_client.Site(origins.same_origin, origins.secure))  # /ui/, an API client
    return app


def watch_service(telemetry: Telemetry, svc: wiring.Service) -> None:
    """Hook ``telemetry`` into the started service's loop, before its first iteration."""
    svc.loop.telemetry = telemetry
    telemetry.observe(
        lambda: svc.loop.view,
        lambda: _members_ready(svc),
    )
    pending = [p.job for jobs in svc.loop.view.pending.values() for p in jobs]
    telemetry.queued(pending, svc.clock.now())  # found at start: waiting since then


def _members_ready(svc: wiring.Service) -> dict[str, bool]:
    """Each member's readiness, from the published view (the API reads no live state)."""
    unready = svc.loop.view.unready
    return {name: name not in unready for name in sorted(svc.loop.members)}
