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

import ipaddress
import os
from pathlib import Path
from typing import Final, Literal

from pydantic import Field, HttpUrl, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The examples shipped with Fleet, used when the database holds no tree or clusters yet.
POLICIES: Final = Path(__file__).resolve().parents[2] / "policies"
#: Where member kubeconfigs live (the Helm chart mounts them there).
DEFAULT_KUBECONFIG_DIR: Final = Path("/etc/fleet/kubeconfigs")
#: Fewest characters of a replica secret (a hex-encoded 128-bit key).
MIN_REPLICA_SECRET: Final = 32


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
        description="SQLAlchemy URL: sqlite+aiosqlite:///PATH or postgresql+asyncpg://... "
        "(its password is never logged or shown: fleet.store.database.redact_url).",
        repr=False,  # a settings repr (a log line, a traceback) shows no password
    )
    clusters: Path = Field(
        POLICIES / "clusters" / "example.yaml",
        description="MemberCluster documents loaded at start when the database has no clusters.",
    )
    quota: Path = Field(
        POLICIES / "quota" / "team-tree.yaml",
        description="ElasticQuotaTree loaded at start when the database has no tree.",
    )
    kubeconfig_dir: Path = Field(
        DEFAULT_KUBECONFIG_DIR,
        description="Directory of the members' kubeconfig files: a member's "
        "spec.kubeconfig.path must resolve (symbolic links followed) to a file inside it; "
        "a relative path is taken from it.",
    )
    hub_kubeconfig: Path | None = Field(
        None,
        description="Kubeconfig of a hub cluster: Fleet then also takes ElasticQuotaTree, "
        "PropagationPolicies and jobs applied there with kubectl, and writes Queue objects, "
        "job statuses and Events there (fleet.hub). A relative path is taken from the "
        "working directory.",
    )
    hub_context: str | None = Field(
        None, description="The context of --hub-kubeconfig to use (default: its current one)."
    )
    allow_kubeconfig_exec: bool = Field(
        False,
        description="Let member kubeconfigs get credentials from plugins (a user's exec or "
        "auth-provider), which run as the server's user; false: such kubeconfigs are refused.",
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
    max_yaml_depth: int = Field(
        100,
        gt=0,
        le=1000,
        description="Most nested YAML lists and mappings in a request body (422 above).",
    )
    max_yaml_alias_nodes: int = Field(
        100_000,
        gt=0,
        description="Most YAML nodes that aliases may stand for in one request body (422 above).",
    )
    max_replicas_per_job: int = Field(
        1000,
        gt=0,
        le=10_000,
        description="Most pods (replicas of every role) accepted in one job (422 above).",
    )
    max_string_length: int = Field(
        32 * 1024,
        gt=0,
        description="Most characters in any one string of a submitted document (422 above).",
    )
    log_level: str = Field("INFO", description="Python logging level name.")
    log_format: Literal["auto", "json", "text"] = Field(
        "auto",
        description="Log lines as JSON objects (time, level, logger, message, trace_id, "
        "span_id) or as text; auto: text when stderr is a terminal, JSON otherwise.",
    )
    otlp_endpoint: str | None = Field(
        None,
        description="OTLP/HTTP collector base URL (e.g. http://otel-collector:4318): traces "
        "and metrics are also pushed there; none: only /metrics.",
    )
    tokens_file: Path | None = Field(
        None,
        description="YAML file of bearer tokens (name, role, queues, sha256); none: every "
        "caller is admin and only a loopback host is allowed.",
    )
    quota_cut_grace: float | None = Field(
        None,
        gt=0,
        description="Seconds after a quota cut before the newest over-limit jobs are "
        "preempted; none: never.",
    )
    estimate_interval: float = Field(
        30.0,
        ge=0,
        description="Seconds between two refreshes of the pending jobs' estimated start "
        "times (a forecast by the simulator; only when something changed); 0 turns it off.",
    )
    history_interval: float = Field(
        60.0,
        ge=0,
        description="Seconds between two samples of the queues' figures (GPUs used, jobs "
        "running and pending, p95 wait) that the dashboard's charts show; 0 turns it off.",
    )
    history_retention: float = Field(
        7 * 24 * 3600.0,
        gt=0,
        description="Seconds a history sample is kept; older ones are deleted as new ones "
        "are written (default 7 days).",
    )
    parse_processes: int = Field(
        0,
        ge=0,
        le=64,
        description="Processes that read and check submitted YAML beside the one that serves "
        "(worth it with cores to spare: on two cores it measured no faster); 0: submissions "
        "are read in the serving process.",
    )
    estimate_process: bool = Field(
        True,
        description="Run the forecasts behind estimated start times in a process of their "
        "own, so that they do not slow the API and the scheduler; false: in a thread.",
    )

    leader_lease_seconds: float = Field(
        15.0,
        gt=0,
        description="PostgreSQL: seconds a replica leads the scheduler without renewing its "
        "lease; after a leader dies, another leads within about this long.",
    )
    leader_renew_seconds: float = Field(
        5.0,
        gt=0,
        description="PostgreSQL: seconds between two renewals of the leader's lease (and "
        "between two attempts of a follower to take an expired one); below the lease.",
    )
    advertise_url: str | None = Field(
        None,
        description="PostgreSQL: the base URL other replicas reach this one at when it leads "
        "(they forward the leader's routes there); none: http://HOST:PORT.",
    )

    # Who reaches the service, and how much of it one caller may hold.
    replica_secret: SecretStr | None = Field(
        None,
        description="PostgreSQL: a secret shared by the replicas (at least "
        f"{MIN_REPLICA_SECRET} characters): a follower forwards the leader's routes with the "
        "caller's identity signed with it (HMAC-SHA256), never with the caller's token; none: "
        "followers do not forward, they answer 421 naming the leader's address.",
    )
    public_url: HttpUrl | None = Field(
        None,
        description="The URL clients reach Fleet at (e.g. https://fleet.example.com behind a "
        "TLS-terminating proxy): writes may come from its origin, and with https the "
        "dashboard's cookie is Secure; none: the request's own scheme and Host only.",
    )
    trust_forwarded_proto: bool = Field(
        False,
        description="Believe a proxy's X-Forwarded-Proto header (https: the client used TLS, "
        "so the dashboard's cookie is Secure and https origins match); only behind a proxy "
        "that sets it on every request.",
    )
    max_streams_per_token: int = Field(
        8,
        gt=0,
        le=10_000,
        description="Event streams (GET /api/v1/events) one token may hold open at once "
        "(429 above; without tokens, all callers together).",
    )
    max_simulations_per_token: int = Field(
        2,
        gt=0,
        le=1000,
        description="Quota-tree simulations (dryRun=Simulate) one token may run at once "
        "(429 above; without tokens, all callers together).",
    )

    @model_validator(mode="after")
    def _renew_within_the_lease(self) -> Settings:
        if self.leader_renew_seconds >= self.leader_lease_seconds:
            raise ValueError(
                f"leader_renew_seconds ({self.leader_renew_seconds}) must be below "
                f"leader_lease_seconds ({self.leader_lease_seconds})"
            )
        return self

    @model_validator(mode="after")
    def _a_long_replica_secret(self) -> Settings:
        secret = self.replica_secret
        if secret is not None and len(secret.get_secret_value()) < MIN_REPLICA_SECRET:
            raise ValueError(
                f"replica_secret has {len(secret.get_secret_value())} characters: it must have "
                f"at least {MIN_REPLICA_SECRET} (e.g. openssl rand -hex 32)"
            )
        return self

    @model_validator(mode="after")
    def _public_url_is_an_origin(self) -> Settings:
        url = self.public_url
        if url is not None and (url.path not in (None, "", "/") or url.query or url.fragment):
            raise ValueError(
                f"public_url {str(url)!r} must be scheme://host[:port] only: Fleet serves "
                "its routes at the root, so a path, query or fragment cannot be honoured"
            )
        return self

    @model_validator(mode="after")
    def _no_tokens_means_loopback(self) -> Settings:
        if self.tokens_file is None and not _loopback(self.host):
            raise ValueError(
                f"host {self.host!r} is not a loopback address: without --tokens-file every "
                "caller is admin, so Fleet listens only on 127.0.0.1, ::1 or localhost"
            )
        return self


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
