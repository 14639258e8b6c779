"""``fleet apply|get|describe|delete``: talk to a running Fleet server over HTTP.

Theory of operation: each command is one or a few HTTP requests (standard
library ``urllib``, no event loop) to the server named by ``--server`` or
``FLEET_SERVER`` (default ``http://127.0.0.1:8080``), with the bearer token
of ``--token`` or ``FLEET_TOKEN`` when one is given; a redirect is followed,
but the token goes only to the origin (scheme, host and port) it was sent to,
as browsers and ``requests`` do: a redirect elsewhere drops it
(:class:`_TokenStaysHome`).  ``apply -f`` sends an
ElasticQuotaTree to ``PUT /api/v1/quota-tree`` and anything else as a
submission, printing a line per job, or for a file of PropagationPolicies
alone a line per policy stored (``get policies`` lists the stored ones,
``delete policy NS/NAME`` deletes one); ``edit quota NODE`` patches one node
of the tree.  Answers are printed as
kubectl-like aligned tables, or as the server's JSON (``-o json``) or YAML
(``-o yaml``).  A problem the server answers (RFC 9457) is printed readably:
its title, its detail, and every field error with document, kind, name and
path; the exit status is then 1.  ``get jobs --watch`` polls.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from http.client import HTTPMessage
from pathlib import Path
from typing import IO, Any, Final, NamedTuple

DEFAULT_SERVER: Final = "http://127.0.0.1:8080"
TIMEOUT: Final = 30.0


class RemoteError(Exception):
    """The server could not be reached, or answered with a problem (already formatted)."""


class Server(NamedTuple):
    """Where to send requests, and the bearer token to send (None: none)."""

    url: str
    token: str | None = None


def _server(args: argparse.Namespace) -> Server:
    url: str = args.server or os.environ.get("FLEET_SERVER") or DEFAULT_SERVER
    token = getattr(args, "token", None) or os.environ.get("FLEET_TOKEN") or None
    return Server(url.rstrip("/"), token)


def _format_problem(status: int, body: bytes) -> str:
    try:
        problem = json.loads(body)
    except ValueError:
        return f"the server answered {status}: {body[:200].decode('utf-8', 'replace')}"
    if not isinstance(problem, dict):
        return f"the server answered {status}"
    lines = [f"{problem.get('title') or 'error'} ({status})"]
    if problem.get("detail"):
        lines.append(str(problem["detail"]))
    for error in problem.get("errors") or []:
        where = []
        if error.get("document") is not None:
            where.append(f"document {error['document']}")
        if error.get("kind"):
            where.append(f"{error['kind']} {error.get('name') or ''}".strip())
        if error.get("path"):
            where.append(error["path"])
        lines.append(f"  {', '.join(where) or '-'}: {error.get('message', '')}")
    return "\n".join(lines)


_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` of ``url``, lower-case, the scheme's port when none is written."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # not a port: no origin the token was sent to has it
        port = -1
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


class _TokenStaysHome(urllib.request.HTTPRedirectHandler):
    """Follows redirects; one to another origin goes without ``Authorization``."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and origin(new.full_url) != origin(req.full_url):
            new.remove_header("Authorization")  # gone for every later redirect too
        return new


def request(
    server: Server | str,
    method: str,
    path: str,
    body: bytes | None = None,
    content_type: str = "",
) -> tuple[int, Any]:
    """One HTTP request; the status and the decoded JSON (or text) body."""
    if isinstance(server, str):
        server = Server(server)
    req = urllib.request.Request(server.url + path, data=body, method=method)
    if content_type:
        req.add_header("Content-Type", content_type)
    if server.token:
        req.add_header("Authorization", f"Bearer {server.token}")
    req.add_header("Accept", "application/json")
    try:
        opener = urllib.request.build_opener(_TokenStaysHome)
        with opener.open(req, timeout=TIMEOUT) as resp:
            raw = resp.read()
            status = resp.status
            ctype = resp.headers.get_content_type()
    except urllib.error.HTTPError as e:
        raise RemoteError(_format_problem(e.code, e.read())) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise RemoteError(f"cannot reach the Fleet server at {server.url}: {reason}") from None
    if ctype.endswith("json"):
        return status, json.loads(raw)
    return status, raw.decode("utf-8", "replace")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """kubectl-like aligned columns."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def _quantities(values: dict[str, str], empty: str = "-") -> str:
    """``gpu=8,cpu=96``; ``empty`` when nothing is listed (``unlimited`` for a max)."""
    gpu = values.get("nvidia.com/gpu")
    rest = [f"{k}={v}" for k, v in values.items() if k != "nvidia.com/gpu"]
    return ",".join(([f"gpu={gpu}"] if gpu else []) + rest) or empty


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _timestamp(rfc3339: str) -> float:
    """Seconds since the epoch of an RFC 3339 time as the server writes it."""
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _emit(data: Any, output: str) -> None:
    if output == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        import yaml

        print(yaml.safe_dump(data, sort_keys=False), end="")


# Commands ---------------------------------------------------------------------------


def _apply(args: argparse.Namespace) -> int:
    try:
        body = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as e:
        print(f"error: {args.file}: {e.strerror}", file=sys.stderr)
        return 1
    if _is_quota_tree(body):
        path = "/api/v1/quota-tree" + ("?dryRun=All" if args.dry_run else "")
        _, change = request(_server(args), "PUT", path, body, "application/yaml")
        _print_change(change)
        return 0
    status, answer = request(_server(args), "POST", "/api/v1/submissions", body, "application/yaml")
    if not answer.get("jobs"):  # with jobs, a line per job says what was done
        for key in answer.get("policies", []):
            print(f"propagationpolicy {key} stored")
    for job in answer.get("jobs", []):
        verb = "created" if job.get("created", status == 201) else "unchanged"
        print(f"job {job['namespace']}/{job['name']} {verb} (queue {job['queue']}, {job['state']})")
    return 0


def _is_quota_tree(body: bytes) -> bool:
    """Whether a file to apply is one ElasticQuotaTree (read within the usual YAML bounds)."""
    from fleet.manifests.documents import YAML_LOADER
    from fleet.manifests.yaml_stream import read_documents

    try:
        docs = [d for d in read_documents(body.decode("utf-8"), YAML_LOADER) if d is not None]
    except Exception:  # not readable YAML: the server says what is wrong with it
        return False
    return (
        len(docs) == 1 and isinstance(docs[0], dict) and docs[0].get("kind") == "ElasticQuotaTree"
    )


def _print_change(change: dict[str, Any]) -> None:
    if change.get("dryRun"):
        print("quota tree: dry run, nothing changed")
    else:
        print(f"quota tree version {change['version']} in force")
    for warning in change.get("warnings", []):
        print(f"warning: {warning}")
    for over in change.get("overLimit", []):
        jobs = ", ".join(over["reclaimable"]) or "-"
        print(
            f"{over['node']}: over its {over['limit']} on {over['resource']} "
            f"({over['used']}/{over['allowed']}); reclaimable first: {jobs}"
        )
    for moved in change.get("moved", []):
        print(f"job {moved['job']} moves from {moved['fromQueue']} to {moved['toQueue']}")
    for failed in change.get("failed", []):
        print(f"job {failed['job']} fails: {failed['reason']}")


def _resources(values: Sequence[str], option: str) -> dict[str, str | None]:
    """``r=q`` pairs (``r=`` removes ``r``)."""
    out: dict[str, str | None] = {}
    for item in values:
        name, sep, amount = item.partition("=")
        if not sep or not name:
            raise RemoteError(f"{option} takes RESOURCE=QUANTITY, not {item!r}")
        out[name] = amount or None
    return out


def _edit(args: argparse.Namespace) -> int:
    patch: dict[str, Any] = {}
    if args.min:
        patch["min"] = _resources(args.min, "--min")
    if args.max:
        patch["max"] = _resources(args.max, "--max")
    if args.unlimited:
        patch["max"] = None
    if args.namespaces is not None:
        patch["namespaces"] = [n for n in args.namespaces.split(",") if n]
    if not patch:
        raise RemoteError("nothing to change: give --min, --max, --unlimited or --namespaces")
    path = f"/api/v1/quota-tree/nodes/{urllib.parse.quote(args.node, safe='')}"
    if args.dry_run:
        path += "?dryRun=All"
    body = json.dumps(patch).encode()
    _, change = request(_server(args), "PATCH", path, body, "application/merge-patch+json")
    _print_change(change)
    return 0


def _get(args: argparse.Namespace) -> int:
    server = _server(args)
    while True:
        if args.what == "queues":
            _, data = request(server, "GET", "/api/v1/queues")
            if args.output != "table":
                _emit(data, args.output)
            else:
                rows = [
                    (
                        q["name"],
                        q["parent"],
                        _quantities(q["min"]),
                        _quantities(q["max"], "unlimited"),
                        _quantities(q["used"]),
                        _quantities(q["borrowed"]),
                        q["admitted"],
                        q["pending"],
                    )
                    for q in data["items"]
                ]
                print(
                    table(
                        ("NAME", "PARENT", "MIN", "MAX", "USED", "BORROWED", "ADMITTED", "PENDING"),
                        rows,
                    )
                )
        elif args.what == "clusters":
            _, data = request(server, "GET", "/api/v1/clusters")
            if args.output != "table":
                _emit(data, args.output)
            else:
                cluster_rows: list[tuple[object, ...]] = [
                    (
                        c["name"],
                        c["health"],
                        c["gpus"]["total"],
                        c["gpus"]["used"],
                        c["gpus"]["free"],
                        ",".join(f"{k}={v}" for k, v in sorted(c["labels"].items())),
                    )
                    for c in data["items"]
                ]
                print(table(("NAME", "HEALTH", "GPUS", "USED", "FREE", "LABELS"), cluster_rows))
        elif args.what == "policies":
            _print_policies(server, args)
        else:
            _print_jobs(server, args)
        if not args.watch:
            return 0
        time.sleep(args.interval)
        print()


def _print_jobs(server: Server, args: argparse.Namespace) -> None:
    query = {k: v for k in ("queue", "state", "namespace", "cluster") if (v := getattr(args, k))}
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        params = dict(query, limit="1000")
        if token:
            params["continue"] = token
        _, data = request(server, "GET", "/api/v1/jobs?" + urllib.parse.urlencode(params))
        items += data["items"]
        token = data.get("continue")
        if not token:
            break
    if args.output != "table":
        _emit({"items": items}, args.output)
        return
    now = time.time()
    rows = [
        (
            f"{j['namespace']}/{j['name']}",
            j["kind"],
            j["queue"],
            j["state"],
            j["priorityClass"],
            j["priority"],
            j["mode"],
            j["cluster"],
            _age(now - _timestamp(j["submittedAt"])),
        )
        for j in items
    ]
    headers = (
        "JOB",
        "KIND",
        "QUEUE",
        "STATE",
        "PRIORITY-CLASS",
        "PRIORITY",
        "MODE",
        "CLUSTER",
        "AGE",
    )
    print(table(headers, rows))


def _print_policies(server: Server, args: argparse.Namespace) -> None:
    _, data = request(server, "GET", "/api/v1/policies")
    items = [p for p in data["items"] if not args.namespace or p["namespace"] == args.namespace]
    if args.output != "table":
        _emit({"items": items}, args.output)
        return
    now = time.time()
    rows = [
        (
            p["namespace"],
            p["name"],
            p["priority"],
            ",".join(p["selects"]),
            _age(now - _timestamp(p["updated"])),
        )
        for p in items
    ]
    print(table(("NAMESPACE", "NAME", "PRIORITY", "SELECTS", "AGE"), rows))


def _object_path(collection: str, kind: str, ref: str) -> str:
    """``/api/v1/COLLECTION/NAMESPACE/NAME`` of a ``NAMESPACE/NAME`` reference to a ``kind``."""
    namespace, sep, name = ref.partition("/")
    if not sep or not namespace or not name:
        raise RemoteError(f"name the {kind} as NAMESPACE/NAME, not {ref!r}")
    return f"/api/v1/{collection}/{urllib.parse.quote(namespace)}/{urllib.parse.quote(name)}"


def _job_path(ref: str) -> str:
    return _object_path("jobs", "job", ref)


def _describe_queue(args: argparse.Namespace) -> int:
    """``fleet describe queue NAME``: its quota, usage, fair share and why, per-user
    limits with each user's use, and its waiting jobs."""
    path = f"/api/v1/queues/{urllib.parse.quote(args.job, safe='')}"
    _, queue = request(_server(args), "GET", path)
    if args.output != "table":
        _emit(queue, args.output)
        return 0
    print(f"{'Name:':16}{queue['name']}")
    print(f"{'Parent:':16}{queue.get('parent') or '-'}")
    print(f"{'Namespaces:':16}{', '.join(queue.get('namespaces', [])) or '-'}")
    print(f"{'Min:':16}{_quantities(queue.get('min', {}))}")
    print(f"{'Max:':16}{_quantities(queue.get('max', {}), 'unlimited')}")
    print(f"{'Used:':16}{_quantities(queue.get('used', {}))}")
    print(f"{'Borrowed:':16}{_quantities(queue.get('borrowed', {}))}")
    print(f"{'Admitted:':16}{queue.get('admitted', 0)} jobs")
    print(f"{'Pending:':16}{len(queue.get('pending', []))} jobs")
    fair = queue.get("fairShare")
    if fair:
        half_life = fair["halfLifeSeconds"]
        memory = f"half-life {half_life / 3600:g}h" if half_life else "no memory"
        print(f"{'Fair share:':16}weight {fair['weight']:g}, {memory}")
        usage = ", ".join(f"{r}={v:g}" for r, v in fair["decayedUsage"].items())
        print(f"{'Decayed usage:':16}{usage + ' (resource-hours)' if usage else '-'}")
        share = "-" if fair.get("share") is None else f"{fair['share']:.4g}"
        print(f"{'Share:':16}{share} (rank {fair['rank']} of {fair['siblings']})")
        print(f"{'Why:':16}{fair['explanation']}")
    per_user = queue.get("perUser")
    if per_user:
        limits = ", ".join(f"{k}={v}" for k, v in per_user["limits"].items())
        print(f"{'Per user:':16}{limits}")
        rows = [
            (u["user"], u["runningJobs"], _quantities(u.get("resources", {})))
            for u in per_user.get("users", [])
        ]
        print("  " + table(("USER", "JOBS", "RESOURCES"), rows).replace("\n", "\n  "))
    pending = [
        (p["position"], p["job"], p["priority"], _quantities(p["request"]), p["reason"])
        for p in queue.get("pending", [])
    ]
    if pending:
        print("Waiting:")
        header = ("#", "JOB", "PRIORITY", "REQUEST", "REASON")
        print("  " + table(header, pending).replace("\n", "\n  "))
    return 0


def _describe(args: argparse.Namespace) -> int:
    if args.kind == "queue":
        return _describe_queue(args)
    _, job = request(_server(args), "GET", _job_path(args.job))
    if args.output != "table":
        _emit(job, args.output)
        return 0
    from fleet.cli import describe_job  # (it uses this module's table)

    print(describe_job.render(job, time.time()))
    return 0


def _delete(args: argparse.Namespace) -> int:
    if args.kind == "policy":
        path = _object_path("policies", "policy", args.ref)
        _, policy = request(_server(args), "DELETE", path)
        print(f"propagationpolicy {policy['namespace']}/{policy['name']} deleted")
        return 0
    _, job = request(_server(args), "DELETE", _job_path(args.ref))
    print(f"job {job['namespace']}/{job['name']} cancelled")
    return 0


def _guard(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = handler(args)
            return code
        except RemoteError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130

    return run


def add_parsers(sub: Any) -> None:
    """Add ``apply``, ``get``, ``describe`` and ``delete`` to the ``fleet`` subcommands."""
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument(
        "--server",
        help=f"Fleet server URL (default: $FLEET_SERVER, else {DEFAULT_SERVER})",
    )
    server.add_argument(
        "--token",
        help="bearer token to send (default: $FLEET_TOKEN; none when neither is set)",
    )
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="table (default), json or yaml",
    )

    a = sub.add_parser("apply", help="submit jobs and store PropagationPolicies", parents=[server])
    a.add_argument(
        "-f",
        "--file",
        required=True,
        metavar="FILE",
        help="YAML file to submit (- for stdin): jobs and PropagationPolicies (every policy "
        "is stored and selects later jobs of its namespace too); one ElasticQuotaTree "
        "replaces the quota tree",
    )
    a.add_argument(
        "--dry-run",
        action="store_true",
        help="quota tree: print what the change would do now and change nothing",
    )
    a.set_defaults(handler=_guard(_apply))

    e = sub.add_parser("edit", help="change one node of the quota tree (admin)", parents=[server])
    e.add_argument("kind", choices=("quota",), help="what to edit")
    e.add_argument("node", metavar="NODE", help="the node of the quota tree")
    e.add_argument(
        "--min",
        action="append",
        metavar="RESOURCE=QUANTITY",
        help="set (or with no quantity, remove) one resource of min; repeatable",
    )
    e.add_argument(
        "--max",
        action="append",
        metavar="RESOURCE=QUANTITY",
        help="set (or with no quantity, remove) one resource of max; repeatable",
    )
    e.add_argument("--unlimited", action="store_true", help="remove the node's max altogether")
    e.add_argument("--namespaces", metavar="NS,NS", help="the leaf's namespaces (replaces them)")
    e.add_argument(
        "--dry-run", action="store_true", help="print what the change would do; change nothing"
    )
    e.set_defaults(handler=_guard(_edit))

    g = sub.add_parser(
        "get", help="list queues, jobs, clusters or stored policies", parents=[server, output]
    )
    g.add_argument("what", choices=("queues", "jobs", "clusters", "policies"), help="what to list")
    g.add_argument("--queue", help="jobs: only this queue")
    g.add_argument("--state", help="jobs: only this state (Queued, Running, ...)")
    g.add_argument("--namespace", help="jobs, policies: only this namespace")
    g.add_argument("--cluster", help="jobs: only this member cluster")
    g.add_argument(
        "-w", "--watch", action="store_true", help="print again every --interval seconds"
    )
    g.add_argument(
        "--interval", type=float, default=2.0, help="seconds between --watch updates (default 2)"
    )
    g.set_defaults(handler=_guard(_get))

    d = sub.add_parser(
        "describe",
        help="one job in detail (placement, reason, events), or one queue (quota, fair "
        "share and why, per-user use, pending jobs)",
        parents=[server, output],
    )
    d.add_argument("kind", choices=("job", "queue"), help="what to describe")
    d.add_argument("job", metavar="NAMESPACE/NAME|QUEUE", help="the job, or the queue's name")
    d.set_defaults(handler=_guard(_describe))

    x = sub.add_parser(
        "delete",
        help="cancel a job (it is removed from its member), or delete a stored policy",
        parents=[server],
    )
    x.add_argument("kind", choices=("job", "policy"), help="what to delete")
    x.add_argument("ref", metavar="NAMESPACE/NAME", help="the job or the PropagationPolicy")
    x.set_defaults(handler=_guard(_delete))
