"""The application's typed keys: what handlers may find on ``request.app``."""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from fleet.service import Service
from fleet.settings import Settings
from fleet.sim.forecast import Estimator

SETTINGS: Final = web.AppKey("settings", Settings)
SERVICE: Final = web.AppKey("service", Service)
OPENAPI: Final = web.AppKey("openapi", dict[str, Any])
ESTIMATOR: Final = web.AppKey("estimator", Estimator)
