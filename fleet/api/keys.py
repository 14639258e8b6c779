"""The typed keys: what handlers may find on ``request.app`` and ``request``."""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from fleet.api.audit import AuditLog
from fleet.api.limits import Slots
from fleet.api.parse_workers import ParseWorkers
from fleet.api.replicas import Verifier
from fleet.api.routing import Route
from fleet.api.tokens import Caller, TokenStore
from fleet.service.history import Sampler
from fleet.service.settings import Settings
from fleet.service.wiring import Service
from fleet.sim.forecast import Estimator

SETTINGS: Final = web.AppKey("settings", Settings)
SERVICE: Final = web.AppKey("service", Service)
OPENAPI: Final = web.AppKey("openapi", dict[str, Any])
TOKENS: Final = web.AppKey("tokens", TokenStore)
#: operation id -> its route as declared (fleet.api.routes.ROUTES)
ROUTE_TABLE: Final = web.AppKey("routes", dict[str, Route])
#: the authenticated caller of a request
CALLER_KEY: Final = web.RequestKey("caller", Caller)
#: set by a handler that stored the request's audit record itself (in its own transaction)
AUDITED_KEY: Final = web.RequestKey("audited", bool)
ESTIMATOR: Final = web.AppKey("estimator", Estimator)
#: the history sampler (it runs on the replica that schedules)
SAMPLER: Final = web.AppKey("sampler", Sampler)
#: the audit log's writer (while the service runs)
AUDIT: Final = web.AppKey("audit", AuditLog)
#: where submissions are read (absent: in the serving process)
PARSE_WORKERS: Final = web.AppKey("parse_workers", ParseWorkers)
#: event streams held open per caller (GET /api/v1/events)
STREAM_SLOTS: Final = web.AppKey("stream_slots", Slots)
#: quota-tree simulations under way per caller (dryRun=Simulate)
SIMULATION_SLOTS: Final = web.AppKey("simulation_slots", Slots)
#: checks the identities followers sign (only with a replica secret)
REPLICA_VERIFIER: Final = web.AppKey("replica_verifier", Verifier)
