"""The service's settings: flags of ``fleet serve``, ``FLEET_*`` environment variables, a file.

Theory of operation: one pydantic-settings model, built once at start and
passed down (no global state).  Every field says its unit and default.
Precedence, highest first: explicit values (the command line), ``FLEET_*``
environment variables, the settings file named by ``FLEET_SETTINGS_FILE``
(a ``.env``-style file), the defaults.  The defaults run a complete service
on a fresh machine: a SQLite file in the working directory and the example
quota tree and simulated clusters shipped in ``policies/``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The examples shipped with Fleet, used when the database holds no tree or clusters yet.
POLICIES: Final = Path(__file__).resolve().parent.parent / "policies"


class Settings(BaseSettings):
    """Everything ``fleet serve`` can be told."""

    model_config = SettingsConfigDict(
        env_prefix="FLEET_",
        env_file=os.environ.get("FLEET_SETTINGS_FILE"),
        extra="forbid",
        frozen=True,
    )

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8080, ge=0, le=65535, description="TCP port to listen on (0: any free port).")
    database_url: str = Field(
        "sqlite+aiosqlite:///./fleet.db",
        description="SQLAlchemy URL: sqlite+aiosqlite:///PATH or postgresql+asyncpg://...",
    )
    clusters: Path = Field(
        POLICIES / "clusters" / "example.yaml",
        description="MemberCluster documents loaded at start when the database has no clusters.",
    )
    quota: Path = Field(
        POLICIES / "quota" / "team-tree.yaml",
        description="ElasticQuotaTree loaded at start when the database has no tree.",
    )
    schedule_interval: float = Field(
        5.0, gt=0, description="Seconds between scheduling cycles (a cycle also runs on changes)."
    )
    max_body_bytes: int = Field(
        4 * 2**20, gt=0, description="Largest accepted request body, in bytes (413 above)."
    )
    max_documents: int = Field(
        1000, gt=0, description="Most YAML documents accepted in one submission."
    )
    log_level: str = Field("INFO", description="Python logging level name.")
    estimate_interval: float = Field(
        30.0,
        ge=0,
        description="Seconds between two refreshes of the pending jobs' estimated start "
        "times (a forecast by the simulator; only when something changed); 0 turns it off.",
    )
