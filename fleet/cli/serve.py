"""``fleet serve``: run the service (HTTP API and scheduler loop) in this process.

Theory of operation: the flags map one to one onto
:class:`fleet.service.settings.Settings` fields; a flag left out falls back to its
``FLEET_*`` environment variable, then to the default, so ``fleet serve``
with no flags runs on the embedded defaults (a SQLite file in the working
directory, the example tree and simulated clusters of ``policies/``).  A port
that is taken (or a host it cannot listen on) is one ``error:`` line and exit
status 1, found before anything starts (:func:`port_problem`) and, should the
port be taken in between, when the server binds.  Logs are text on a terminal
and JSON otherwise unless ``--log-format`` says which
(:func:`fleet.service.telemetry.configure_logging`).  The service itself is
imported only when this command runs.
"""

from __future__ import annotations

import argparse
import errno
import logging
import socket
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    """Add ``serve`` to the ``fleet`` subcommands."""
    p = sub.add_parser(
        "serve",
        help="run the Fleet service: HTTP API and scheduler",
        description="Run the Fleet service. Every flag can also be given as a FLEET_* "
        "environment variable (FLEET_PORT, FLEET_DATABASE_URL, ...).",
    )
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="TCP port to listen on (default 8080)")
    p.add_argument(
        "--database-url",
        help="sqlite+aiosqlite:///PATH (default ./fleet.db) or postgresql+asyncpg://...",
    )
    p.add_argument(
        "--clusters",
        metavar="FILE",
        help="MemberCluster file loaded when the database has no clusters yet "
        "(default: the simulated clusters in policies/clusters/example.yaml)",
    )
    p.add_argument(
        "--quota",
        metavar="FILE",
        help="ElasticQuotaTree file loaded when the database has no tree yet "
        "(default: policies/quota/team-tree.yaml)",
    )
    p.add_argument(
        "--kubeconfig-dir",
        metavar="DIR",
        help="directory of the members' kubeconfigs: spec.kubeconfig.path must resolve to a "
        "file inside it, a relative one is taken from it (default /etc/fleet/kubeconfigs)",
    )
    p.add_argument(
        "--hub-kubeconfig",
        metavar="FILE",
        help="kubeconfig of a hub cluster: ElasticQuotaTree, PropagationPolicies and jobs "
        "applied there with kubectl are Fleet's too, with Queue objects, statuses and Events "
        "written back (deploy/hub/ has its CRDs and role)",
    )
    p.add_argument("--hub-context", metavar="NAME", help="the context of --hub-kubeconfig to use")
    p.add_argument(
        "--allow-kubeconfig-exec",
        action="store_true",
        default=None,
        help="let member kubeconfigs run credential plugins (exec, auth-provider) as this "
        "server's user (default: such kubeconfigs are refused)",
    )
    p.add_argument(
        "--schedule-interval",
        type=float,
        metavar="SECONDS",
        help="seconds between scheduling cycles; a cycle also runs after changes (default 5)",
    )
    p.add_argument(
        "--estimate-interval",
        type=float,
        metavar="SECONDS",
        help="seconds between refreshes of the waiting jobs' estimated starts (default 30; "
        "0 turns them off)",
    )
    p.add_argument(
        "--history-interval",
        type=float,
        metavar="SECONDS",
        help="seconds between samples of the queues' figures for the dashboard's charts "
        "(default 60; 0 turns them off)",
    )
    p.add_argument(
        "--history-retention",
        metavar="DURATION",
        help="how long the dashboard's history samples are kept (e.g. 48h; default 168h, 7 days)",
    )
    p.add_argument("--log-level", help="DEBUG, INFO (default), WARNING or ERROR")
    p.add_argument(
        "--log-format",
        choices=("auto", "json", "text"),
        help="log lines as JSON objects with trace ids or as text; auto (default): text "
        "when stderr is a terminal, JSON otherwise",
    )
    p.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="also push traces and metrics to this OTLP/HTTP collector (e.g. "
        "http://otel-collector:4318)",
    )
    p.add_argument(
        "--tokens-file",
        metavar="FILE",
        help="YAML file of bearer tokens (fleet token create writes it); without one every "
        "caller is admin and only a loopback --host is allowed",
    )
    p.add_argument(
        "--quota-cut-grace",
        metavar="DURATION",
        help="after a quota cut leaves a queue over its limits, preempt its newest over-limit "
        "jobs once this long has passed (e.g. 10m; default: never)",
    )
    p.add_argument(
        "--leader-lease",
        type=float,
        metavar="SECONDS",
        help="PostgreSQL: how long a leader's lease runs without renewal (default 15)",
    )
    p.add_argument(
        "--leader-renew",
        type=float,
        metavar="SECONDS",
        help="PostgreSQL: seconds between renewals of the lease, below --leader-lease (default 5)",
    )
    p.add_argument(
        "--advertise-url",
        metavar="URL",
        help="PostgreSQL: the base URL other replicas reach this one at when it leads "
        "(default http://HOST:PORT)",
    )
    p.add_argument(
        "--public-url",
        metavar="URL",
        help="the URL clients reach Fleet at, e.g. https://fleet.example.com behind a "
        "TLS-terminating proxy: writes may come from its origin, and with https the "
        "dashboard's cookie is Secure",
    )
    p.add_argument(
        "--trust-forwarded-proto",
        action="store_true",
        default=None,
        help="believe the proxy's X-Forwarded-Proto (only behind a proxy that always sets it)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from aiohttp import web
    from pydantic import ValidationError

    from fleet.api.app import create_app
    from fleet.service.settings import Settings

    given = {
        name: value
        for name in (
            "host",
            "port",
            "database_url",
            "clusters",
            "quota",
            "kubeconfig_dir",
            "hub_kubeconfig",
            "hub_context",
            "allow_kubeconfig_exec",
            "schedule_interval",
            "estimate_interval",
            "history_interval",
            "log_level",
            "log_format",
            "otlp_endpoint",
            "tokens_file",
            "advertise_url",
            "public_url",
            "trust_forwarded_proto",
        )
        if (value := getattr(args, name, None)) is not None
    }
    for flag, name in (
        ("leader_lease", "leader_lease_seconds"),
        ("leader_renew", "leader_renew_seconds"),
    ):
        if (value := getattr(args, flag, None)) is not None:
            given[name] = value
    for flag in ("quota_cut_grace", "history_retention"):  # durations such as 10m, 48h
        if (text := getattr(args, flag, None)) is not None:
            from fleet.manifests.models import parse_duration

            try:
                given[flag] = parse_duration(text)
            except ValueError as e:
                print(f"error: --{flag.replace('_', '-')}: {e}", file=sys.stderr)
                return 1
    try:
        settings = Settings(**given)  # also reads the tokens file's path and checks the host
    except ValidationError as e:
        for error in e.errors():
            if not error["loc"]:
                print(f"error: {error['msg'].removeprefix('Value error, ')}", file=sys.stderr)
                continue
            where = ".".join(str(p) for p in error["loc"])
            print(f"error: {where}: {error['msg']}", file=sys.stderr)
        return 1
    if settings.tokens_file is not None:
        from fleet.api.tokens import TokensFileError, read_tokens

        try:
            read_tokens(settings.tokens_file)
        except TokensFileError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    taken = port_problem(settings.host, settings.port)
    if taken:  # before anything starts: one line, no traceback
        print(f"error: {taken}", file=sys.stderr)
        return 1
    from fleet.service.telemetry import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    log = logging.getLogger("fleet.serve")
    from fleet.service.wiring import ConfigurationError
    from fleet.store.database import DatabaseError, redact_url

    log.info("database %s", redact_url(settings.database_url))
    if settings.allow_kubeconfig_exec:
        log.warning("member kubeconfigs may run credential plugins (--allow-kubeconfig-exec)")
    from fleet.service.collector import FollowGrowth

    FollowGrowth().install()  # full collections' pauses follow the growth (fleet.service.collector)
    app = create_app(settings)
    if settings.hub_kubeconfig is not None:
        from fleet.hub import controller

        controller.setup(app, settings)
    try:
        web.run_app(
            app,
            host=settings.host,
            port=settings.port,
            print=lambda text: log.info("%s", text.strip()),
            access_log=None,
        )
    except (ConfigurationError, DatabaseError) as e:  # at start: a clear error, no traceback
        log.error("cannot start: %s", e)
        return 1
    except OSError as e:  # the port was taken after the check above
        if e.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise
        print(f"error: {_listen_error(settings.host, settings.port, e)}", file=sys.stderr)
        return 1
    return 0


def _listen_error(host: str, port: int, error: OSError) -> str:
    if error.errno == errno.EADDRINUSE:
        return f"port {port} on {host} is in use; choose another with --port"
    if error.errno == errno.EACCES:
        return f"port {port} on {host} needs privileges; choose another with --port"
    return f"cannot listen on {host} port {port}: {error.strerror}; check --host"


def port_problem(host: str, port: int) -> str | None:
    """Why ``fleet serve`` could not listen on ``host``:``port`` (None: it can, now).

    The address is bound for a moment, as the server will (``SO_REUSEADDR``, so a
    port that only has connections closing on it is not taken).
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return f"cannot listen on {host}: {e.strerror}; check --host"
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as e:
                if e.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
                    return _listen_error(host, port, e)
                raise
    return None
