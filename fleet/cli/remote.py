"""``fleet apply|get|describe|delete``: talk to a running Fleet server over HTTP.

Theory of operation: each command is one or a few HTTP requests (standard
library ``urllib``, no event loop) to the server, with the bearer token,
that :func:`fleet.cli.config.resolve` picks from ``--server``, ``--token``,
``--context``, the environment and the config file (default
``http://127.0.0.1:8080``, no token); a redirect is followed,
but the token goes only to the origin (scheme, host and port) it was sent to,
as browsers and ``requests`` do: a redirect elsewhere drops it
(:class:`_TokenStaysHome`).  The commands keep kubectl's habits.  ``apply -f``
is repeatable and every file is sent, in order (:func:`_files`: a directory
stands for its ``*.yaml``, ``*.yml`` and ``*.json`` files, sorted, with
``-R`` its subdirectories' too; ``-`` is stdin); a file the server refuses
is reported and the next is still sent, the exit status 1.  An
ElasticQuotaTree goes to ``PUT /api/v1/quota-tree`` and anything else is a
submission, printing a line per job, or for a file of PropagationPolicies
alone a line per policy stored.  ``get KIND [NAME...]`` takes the nouns of
:data:`fleet.cli.views.NOUNS` (singular, plural, short) and prints the
tables of :mod:`fleet.cli.views` (``-o wide``), or the server's JSON or YAML
(one object when one NAME is given), or ``kind/name`` lines (``-o name``);
``-n``, ``-A``, ``-l`` (client-side: the API has no selector) and
``--sort-by`` choose and order the rows; ``get queues`` also reads the
holding jobs, to count the GPUs opportunistic jobs hold; ``get events``
reads ``GET /api/v1/job-events``.  ``--watch`` polls and prints the table,
then the rows that changed (:class:`fleet.cli.views.Watcher`).
``describe job|queue|cluster NAME`` (a cluster: its summary and its cell
map), ``delete job|policy NAME...`` or ``delete -f FILE`` (the jobs and
policies the files hold; each failure reported, the rest still deleted),
and ``edit quota NODE``, which patches one node of the tree (with
``--dry-run``, its fields before and after and the jobs it would affect:
:mod:`fleet.cli.previews`).  A problem the
server answers (RFC 9457) is printed readably: its title, its detail, and
every field error with document, kind, name and path; the exit status is
then 1.
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
from typing import IO, Any, Final, NamedTuple

from fleet.cli import config, previews, views
from fleet.cli.inputs import InputError, read_input
from fleet.service.columns import table

DEFAULT_SERVER: Final = config.DEFAULT_SERVER
TIMEOUT: Final = 30.0


class RemoteError(Exception):
    """The server could not be reached, or answered with a problem (already formatted)."""


class Server(NamedTuple):
    """Where to send requests, and the bearer token to send (None: none)."""

    url: str
    token: str | None = None


def server_of(args: argparse.Namespace) -> Server:
    """The server and token of the flags, the environment or the config file
    (:func:`fleet.cli.config.resolve`); a bad value is a :class:`RemoteError`."""
    try:
        url, token = config.resolve(
            getattr(args, "server", None),
            getattr(args, "token", None),
            getattr(args, "context", None),
        )
    except config.ConfigError as e:
        raise RemoteError(str(e)) from None
    return Server(url, token)


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

#: The suffixes of the files ``apply -f DIR`` and ``delete -f DIR`` read.
MANIFEST_SUFFIXES: Final = (".yaml", ".yml", ".json")


def _files(paths: Sequence[str], recursive: bool) -> list[str]:
    """Every file ``-f`` names, in order: a directory stands for its ``*.yaml``,
    ``*.yml`` and ``*.json`` files, sorted (its subdirectories' too with ``-R``);
    ``-`` is standard input."""
    found: list[str] = []
    for given in paths:
        if given == "-" or not os.path.isdir(given):
            found.append(given)
            continue
        inside: list[str] = []
        if recursive:
            for top, dirs, names in os.walk(given):
                dirs.sort()
                inside += [os.path.join(top, n) for n in sorted(names)]
        else:
            inside = [os.path.join(given, n) for n in sorted(os.listdir(given))]
        chosen = [f for f in inside if f.endswith(MANIFEST_SUFFIXES) and os.path.isfile(f)]
        if not chosen:
            raise RemoteError(f"{given}: no .yaml, .yml or .json file in the directory")
        found += chosen
    return found


def _read_manifest(path: str) -> bytes:
    """The bytes of one file to send (``-``: standard input); RemoteError naming it."""
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return read_input(path).encode("utf-8")
    except InputError as e:
        raise RemoteError(str(e)) from None


def _apply(args: argparse.Namespace) -> int:
    """``apply -f A -f DIR -f -``: every file is sent, in order; a file the server refuses
    is reported and the next one is still sent; the status is 1 if any failed."""
    server = server_of(args)
    failed = 0
    for path in _files(args.file, args.recursive):
        try:
            _apply_one(server, _read_manifest(path), args.dry_run)
        except RemoteError as e:
            print(
                f"error: {e}" if path == "-" or path in str(e) else f"error: {path}: {e}",
                file=sys.stderr,
            )
            failed += 1
    return 1 if failed else 0


def _apply_one(server: Server, body: bytes, dry_run: bool) -> None:
    if _is_quota_tree(body):
        path = "/api/v1/quota-tree" + ("?dryRun=All" if dry_run else "")
        _, change = request(server, "PUT", path, body, "application/yaml")
        _print_change(change)
        return
    status, answer = request(server, "POST", "/api/v1/submissions", body, "application/yaml")
    if not answer.get("jobs"):  # with jobs, a line per job says what was done
        for key in answer.get("policies", []):
            print(f"propagationpolicy {key} stored")
    for job in answer.get("jobs", []):
        verb = "created" if job.get("created", status == 201) else "unchanged"
        print(f"job {job['namespace']}/{job['name']} {verb} (queue {job['queue']}, {job['state']})")


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
        print("quota tree: dry run, nothing changed; the new tree would affect")
        for line in previews.affected(change):
            print(f"  {line}")
        for warning in change.get("warnings", []):
            print(f"warning: {warning}")
        return
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
    body = json.dumps(patch).encode()
    if args.dry_run:  # the node before, and what the server says the patch would do
        server = server_of(args)
        _, tree = request(server, "GET", "/api/v1/quota-tree")
        path += "?dryRun=All"
        _, change = request(server, "PATCH", path, body, "application/merge-patch+json")
        previews.print_edit(args.node, tree, patch, change)
        return 0
    _, change = request(server_of(args), "PATCH", path, body, "application/merge-patch+json")
    _print_change(change)
    return 0


def _ref(name: str, namespace: str | None, kind: str) -> str:
    """``NAMESPACE/NAME`` of a name given as such, or bare with ``-n``."""
    if "/" in name or not namespace:
        return name
    return f"{namespace}/{name}"


def _all_jobs(server: Server, query: dict[str, str]) -> list[dict[str, Any]]:
    """Every job the list answers with ``query``, page after page."""
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
            return items


def _named(kind: str, items: list[dict[str, Any]], wanted: Sequence[str]) -> list[dict[str, Any]]:
    """The items ``wanted`` names (``NS/NAME``, or a ``NAME`` one namespace holds), in
    that order; RemoteError naming those that are not there."""
    by_key = {f"{i['namespace']}/{i['name']}" if "namespace" in i else i["name"]: i for i in items}
    for w in wanted:  # a bare name of a namespaced kind: the one object of that name
        same = [i for i in items if "namespace" in i and i["name"] == w]
        if w not in by_key and len(same) == 1:
            by_key[w] = same[0]
        elif w not in by_key and len(same) > 1:
            spaces = ", ".join(sorted(i["namespace"] for i in same))
            raise RemoteError(f"{w!r} is in several namespaces ({spaces}): give -n or NS/NAME")
    missing = [w for w in wanted if w not in by_key]
    if missing:
        raise RemoteError(f"{views.SINGULAR[kind]} not found: {', '.join(missing)}")
    return [by_key[w] for w in wanted]


def _fetch(server: Server, args: argparse.Namespace, kind: str) -> tuple[list[dict[str, Any]], Any]:
    """The items of ``kind`` that ``fleet get`` shows, and the extra data its table needs."""
    namespace = None if args.all_namespaces else args.namespace
    wanted = [_ref(n, namespace, kind) if kind in ("jobs", "policies") else n for n in args.names]
    if kind == "jobs":
        query = {k: v for k in ("queue", "state", "cluster") if (v := getattr(args, k))}
        spaces = {w.partition("/")[0] for w in wanted if "/" in w}
        if namespace:
            query["namespace"] = namespace
        elif len(spaces) == 1 and len(wanted) == len([w for w in wanted if "/" in w]):
            query["namespace"] = spaces.pop()
        items = _all_jobs(server, query)
    elif kind == "queues":
        _, data = request(server, "GET", "/api/v1/queues")
        items = data["items"]
    elif kind == "clusters":
        _, data = request(server, "GET", "/api/v1/clusters")
        items = data["items"]
    elif kind == "policies":
        _, data = request(server, "GET", "/api/v1/policies")
        items = [p for p in data["items"] if not namespace or p["namespace"] == namespace]
    else:
        query = {"limit": "500"}
        if namespace:
            query["namespace"] = namespace
        if args.for_object:
            query["job"] = _for_job(args.for_object, namespace)
        _, data = request(server, "GET", "/api/v1/job-events?" + urllib.parse.urlencode(query))
        items = data["items"]
    if wanted:
        items = _named(kind, items, wanted)
    try:
        items = [dict(i) for i in views.select(items, args.selector)]
    except ValueError as e:
        raise RemoteError(str(e)) from None
    extra: Any = None
    if kind == "queues" and args.output in ("table", "wide"):
        holding = [
            j
            for s in ("Admitted", "Dispatched", "Running")
            for j in _all_jobs(server, {"state": s})
        ]
        extra = views.opportunistic_gpus(items, holding)
    return items, extra


def _for_job(text: str, namespace: str | None) -> str:
    """``--for job/NS/NAME`` (``job/NAME`` with ``-n``; ``NS/NAME`` alone too) as NS/NAME."""
    kind, sep, rest = text.partition("/")
    if sep and kind.lower() in ("job", "jobs") and rest:
        text = rest
    ref = _ref(text, namespace, "jobs")
    if ref.count("/") != 1:
        raise RemoteError(f"--for takes job/NAMESPACE/NAME (or job/NAME with -n), not {text!r}")
    return ref


def _table(
    kind: str, items: list[dict[str, Any]], extra: Any, args: argparse.Namespace
) -> views.Table:
    now = time.time()
    wide = args.output == "wide"
    if kind == "jobs":
        namespaced = bool(args.namespace) and not args.all_namespaces
        return views.jobs_table(items, now, wide=wide, namespaced=namespaced)
    if kind == "queues":
        show = args.show_internal
        return views.queues_table(items, extra or {}, wide=wide, show_internal=show)
    if kind == "clusters":
        return views.clusters_table(items, wide=wide)
    if kind == "policies":
        return views.policies_table(items, now)
    return views.events_table(items, now)


def _get(args: argparse.Namespace) -> int:
    """``fleet get KIND [NAME...]``: a table, ``-o wide``, ``json``, ``yaml`` or ``name``;
    with ``--watch`` the table, then only the rows that change."""
    try:
        kind = views.noun(args.kind)
    except ValueError as e:
        raise RemoteError(str(e)) from None
    server = server_of(args)
    watcher = views.Watcher()
    while True:
        items, extra = _fetch(server, args, kind)
        if args.output in ("json", "yaml"):
            if args.sort_by:
                ordered = _sorted(_table(kind, items, extra, args), args.sort_by)
                items = [dict(r.item) for r in ordered.rows]
            _emit(items[0] if len(args.names) == 1 and items else {"items": items}, args.output)
        elif args.output == "name":
            shown = _table(kind, items, extra, args)
            if args.sort_by:
                _sorted(shown, args.sort_by)
            print("\n".join(views.names(kind, [r.item for r in shown.rows])))
        else:
            shown = _table(kind, items, extra, args)
            if args.sort_by:
                _sorted(shown, args.sort_by)
            if not shown.rows and not args.watch:
                where = f" in namespace {args.namespace}" if args.namespace else ""
                print(f"No {kind} found{where}.", file=sys.stderr)
            else:
                text = watcher.update(shown)
                if text:
                    print(text, flush=True)
        if not args.watch:
            return 0
        time.sleep(args.interval)


def _sorted(shown: views.Table, by: str) -> views.Table:
    try:
        views.sort_rows(shown, by)
    except ValueError as e:
        raise RemoteError(str(e)) from None
    return shown


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
    _, queue = request(server_of(args), "GET", path)
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
    try:
        kind = views.noun(args.kind, ("jobs", "queues", "clusters"))
    except ValueError as e:
        raise RemoteError(str(e)) from None
    if kind == "queues":
        return _describe_queue(args)
    if kind == "clusters":
        return _describe_cluster(args)
    args.job = _ref(args.job, args.namespace, "jobs")
    return _describe_job(args)


def _describe_cluster(args: argparse.Namespace) -> int:
    """``fleet describe cluster NAME``: health, GPUs, virtual clusters, and its nodes
    with the GPUs each queue holds there (the cell map)."""
    server = server_of(args)
    _, data = request(server, "GET", "/api/v1/clusters")
    cluster = next((c for c in data["items"] if c["name"] == args.job), None)
    if cluster is None:
        known = ", ".join(c["name"] for c in data["items"]) or "none"
        raise RemoteError(f"no member cluster {args.job!r} (the clusters: {known})")
    nodes: list[dict[str, Any]] = []
    token: str | None = None
    base = f"/api/v1/clusters/{urllib.parse.quote(args.job, safe='')}/cells"
    while True:
        params = {"limit": "500", **({"continue": token} if token else {})}
        _, cells = request(server, "GET", base + "?" + urllib.parse.urlencode(params))
        nodes += cells["nodes"]
        token = cells.get("continue")
        if not token:
            break
    if args.output in ("json", "yaml"):
        _emit(dict(cluster, nodes=nodes), args.output)
        return 0
    gpus = cluster["gpus"]
    labels = ", ".join(f"{k}={v}" for k, v in sorted(cluster["labels"].items()))
    print(f"{'Name:':16}{cluster['name']}")
    print(f"{'Labels:':16}{labels or '-'}")
    print(f"{'Health:':16}{cluster['health']} ({cluster.get('message') or '-'})")
    print(f"{'Simulated:':16}{'yes' if cluster.get('simulated') else 'no'}")
    print(f"{'Draining:':16}{'yes' if cluster.get('draining') else 'no'}")
    print(f"{'GPUs:':16}{gpus['total']} total, {gpus['used']} used, {gpus['free']} free")
    print(f"{'Nodes:':16}{len(nodes)}, bad: {', '.join(cluster.get('badNodes') or []) or 'none'}")
    topology = cluster.get("topology") or {}
    types = ", ".join(
        f"{t['product']} ({t['gpus']} GPUs on {t['nodes']} nodes)"
        for t in topology.get("gpuTypes", [])
    )
    if types:
        print(f"{'GPU types:':16}{types}")
    by_queue: dict[str, int] = {}
    for node in nodes:
        for cell in node["cells"]:
            if cell.get("queue"):
                by_queue[cell["queue"]] = by_queue.get(cell["queue"], 0) + 1
    print("In use by queue:")
    rows = [(q, n) for q, n in sorted(by_queue.items(), key=lambda x: (-x[1], x[0]))]
    print("  " + table(("QUEUE", "GPUS"), rows).replace("\n", "\n  "))
    vcs = [
        (v["name"], f"{v['gpus']['used']}/{v['gpus']['total']}", v.get("doomedCells", 0))
        for v in cluster.get("virtualClusters", [])
    ]
    if vcs:
        print("Virtual clusters:")
        print("  " + table(("VC", "GPUS USED", "DOOMED CELLS"), vcs).replace("\n", "\n  "))
    print("Nodes:")
    node_rows = []
    for node in nodes:
        held = [c for c in node["cells"] if c.get("job")]
        queues = sorted({c["queue"] for c in held if c.get("queue")})
        node_rows.append(
            (
                node["name"],
                node["gpuType"],
                "yes" if node["healthy"] else f"no ({node.get('reason') or 'marked bad'})",
                f"{len(held)}/{len(node['cells'])}",
                ",".join(queues) or "-",
            )
        )
    heads = ("NODE", "GPU TYPE", "HEALTHY", "GPUS USED", "QUEUES")
    print("  " + table(heads, node_rows).replace("\n", "\n  "))
    return 0


def _describe_job(args: argparse.Namespace) -> int:
    _, job = request(server_of(args), "GET", _job_path(args.job))
    if args.output != "table":
        _emit(job, args.output)
        return 0
    from fleet.cli import describe_job  # (it uses this module's table)

    print(describe_job.render(job, time.time()))
    return 0


def _delete_targets(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(kind, NS/NAME)`` of what to delete: the names given, or the jobs and
    PropagationPolicies the ``-f`` files hold (their other documents are skipped)."""
    if args.file:
        if args.kind or args.names:
            raise RemoteError("give either KIND NAME... or -f FILE, not both")
        return _targets_in_files(args)
    if not args.kind or not args.names:
        raise RemoteError("name what to delete: KIND NAME [NAME...] (or -f FILE)")
    try:
        kind = views.noun(args.kind, ("jobs", "policies"))
    except ValueError as e:
        raise RemoteError(str(e)) from None
    return [(kind, _ref(n, args.namespace, kind)) for n in args.names]


def _targets_in_files(args: argparse.Namespace) -> list[tuple[str, str]]:
    from fleet.manifests.documents import YAML_LOADER
    from fleet.manifests.yaml_stream import read_documents

    targets: list[tuple[str, str]] = []
    for path in _files(args.file, args.recursive):
        try:
            docs = read_documents(_read_manifest(path).decode("utf-8"), YAML_LOADER)
        except RemoteError:
            raise
        except Exception as e:  # not YAML: say which file
            raise RemoteError(f"{path}: not readable YAML: {e}") from None
        for doc in docs:
            if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
                continue
            kind = doc.get("kind")
            if kind in NOT_DELETED:
                continue
            meta = doc["metadata"]
            namespace = meta.get("namespace") or args.namespace
            if not namespace or not meta.get("name"):
                raise RemoteError(
                    f"{path}: {kind} {meta.get('name')!r} names no namespace (give -n)"
                )
            noun = "policies" if kind == "PropagationPolicy" else "jobs"
            targets.append((noun, f"{namespace}/{meta['name']}"))
    if not targets:
        raise RemoteError("the files name no job or PropagationPolicy to delete")
    return targets


#: Documents ``delete -f`` leaves alone: what a file of jobs may also hold.
NOT_DELETED: Final = frozenset(
    {"ElasticQuotaTree", "MemberCluster", "ClusterTrainingRuntime", "TrainingRuntime"}
)


def _delete(args: argparse.Namespace) -> int:
    """``delete job A B``, ``delete policy NS/NAME``, ``delete -f FILE``: each in turn;
    one that fails is reported and the rest are still deleted (status 1)."""
    server = server_of(args)
    failed = 0
    for kind, ref in _delete_targets(args):
        try:
            if kind == "policies":
                _, policy = request(server, "DELETE", _object_path("policies", "policy", ref))
                print(f"propagationpolicy {policy['namespace']}/{policy['name']} deleted")
            else:
                _, job = request(server, "DELETE", _job_path(ref))
                print(f"job {job['namespace']}/{job['name']} cancelled")
        except RemoteError as e:
            print(f"error: {e}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


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


def _command(sub: Any, name: str, help: str, description: str, example: str, **kw: Any) -> Any:
    """A subcommand whose ``--help`` has a description and examples."""
    return sub.add_parser(
        name,
        help=help,
        description=description,
        epilog="examples:\n" + example,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kw,
    )


def _namespace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n",
        "--namespace",
        metavar="NAMESPACE",
        help="only this namespace; NAME may then be given without NAMESPACE/",
    )


def add_parsers(sub: Any) -> None:
    """Add ``apply``, ``edit``, ``get``, ``describe`` and ``delete`` to the subcommands."""
    server = config.server_options()
    files = argparse.ArgumentParser(add_help=False)
    files.add_argument(
        "-R",
        "--recursive",
        action="store_true",
        help="a directory given to -f: its subdirectories' files too",
    )

    a = _command(
        sub,
        "apply",
        "submit jobs and store PropagationPolicies",
        "Send files to the server: jobs and PropagationPolicies (every policy is stored "
        "and selects later jobs of its namespace too), or one ElasticQuotaTree, which "
        "replaces the quota tree. Every -f is sent, in order; a directory stands for its "
        "*.yaml, *.yml and *.json files, sorted.",
        "  fleet apply -f job.yaml\n"
        "  fleet apply -f policy.yaml -f jobs/          # both, the directory's files sorted\n"
        "  cat job.yaml | fleet apply -f -\n"
        "  fleet apply -f tree.yaml --dry-run           # what a new quota tree would do",
        parents=[server, files],
    )
    a.add_argument(
        "-f",
        "--file",
        required=True,
        action="append",
        metavar="FILE",
        help="a file, a directory or - for stdin; repeatable, each one is sent",
    )
    a.add_argument(
        "--dry-run",
        action="store_true",
        help="quota tree: print what the change would do now and change nothing",
    )
    a.set_defaults(handler=_guard(_apply))

    e = _command(
        sub,
        "edit",
        "change one node of the quota tree (admin)",
        "Change one node of the quota tree in force: its min, max or namespaces. "
        "With --dry-run, print what the change would do and change nothing.",
        "  fleet edit quota team-a --max nvidia.com/gpu=32\n"
        "  fleet edit quota team-a --min nvidia.com/gpu=8 --dry-run\n"
        "  fleet edit quota sandbox --unlimited",
        parents=[server],
    )
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

    kinds = "jobs (job), queues (queue, q), clusters (cluster), policies (policy), events (event)"
    g = _command(
        sub,
        "get",
        "list queues, jobs, clusters, policies or events",
        f"List objects as a table, or as JSON, YAML or names. KIND: {kinds}. "
        "Without -n, every namespace the token sees (as -A).",
        "  fleet get queues                          # GPU-first: used/min/max, pending\n"
        "  fleet get jobs -n team-a -o wide\n"
        "  fleet get job team-a/pytorch-test -o yaml\n"
        "  fleet get jobs -l app=bert,tier!=dev --sort-by AGE\n"
        "  fleet get jobs --sort-by .metadata.name -o name\n"
        "  fleet get events --for job/team-a/pytorch-test\n"
        "  fleet get jobs --watch                    # the table, then the rows that change",
        parents=[server],
    )
    g.add_argument("kind", metavar="KIND", help="what to list: " + kinds)
    g.add_argument("names", nargs="*", metavar="NAME", help="only these (NAMESPACE/NAME for jobs)")
    g.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json", "yaml", "name"),
        default="table",
        help="table (default), wide (more columns), json, yaml, or name (kind/name lines)",
    )
    _namespace(g)
    g.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (the default)"
    )
    g.add_argument(
        "-l",
        "--selector",
        metavar="SELECTOR",
        help="only objects whose labels match: key=value, key!=value, key, !key; comma: all",
    )
    g.add_argument(
        "--sort-by",
        metavar="COLUMN|PATH",
        help="sort by a column (AGE, GPUS, ...) or a JSON path (.metadata.name, .gpus)",
    )
    g.add_argument(
        "--show-internal",
        action="store_true",
        help="queues: show internal resources (kube-queue/max-jobs) in -o wide",
    )
    g.add_argument("--queue", help="jobs: only this queue")
    g.add_argument("--state", help="jobs: only this state (Queued, Running, ...)")
    g.add_argument("--cluster", help="jobs: only this member cluster")
    g.add_argument(
        "--for",
        dest="for_object",
        metavar="job/NAMESPACE/NAME",
        help="events: only this job's",
    )
    g.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="after the table, print the rows that change, every --interval seconds",
    )
    g.add_argument(
        "--interval", type=float, default=2.0, help="seconds between --watch polls (default 2)"
    )
    g.set_defaults(handler=_guard(_get))

    d = _command(
        sub,
        "describe",
        "one job, queue or cluster in detail",
        "Show one object in detail: a job (placement, reason, estimated start, events), "
        "a queue (quota, fair share and why, per-user use, waiting jobs) or a member "
        "cluster (health, GPUs, nodes and the GPUs each queue holds there).",
        "  fleet describe job team-a/pytorch-test\n"
        "  fleet describe job pytorch-test -n team-a\n"
        "  fleet describe queue team-a\n"
        "  fleet describe cluster east -o yaml",
        parents=[server],
    )
    d.add_argument("kind", metavar="KIND", help="job, queue (q) or cluster")
    d.add_argument("job", metavar="NAME", help="the job (NAMESPACE/NAME), queue or cluster")
    d.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="table (default), json or yaml",
    )
    _namespace(d)
    d.set_defaults(handler=_guard(_describe))

    x = _command(
        sub,
        "delete",
        "cancel jobs, or delete stored policies",
        "Cancel jobs (each is removed from its member cluster) or delete stored "
        "PropagationPolicies: by name, several at once, or those the -f files hold.",
        "  fleet delete job team-a/a team-a/b\n"
        "  fleet delete jobs a b c -n team-a\n"
        "  fleet delete policy team-c/standing\n"
        "  fleet delete -f jobs.yaml                 # the jobs and policies it holds",
        parents=[server, files],
    )
    x.add_argument("kind", nargs="?", metavar="KIND", help="job or policy")
    x.add_argument("names", nargs="*", metavar="NAME", help="NAMESPACE/NAME (or NAME with -n)")
    x.add_argument(
        "-f",
        "--file",
        action="append",
        metavar="FILE",
        help="delete the jobs and PropagationPolicies of this file or directory; repeatable",
    )
    _namespace(x)
    x.set_defaults(handler=_guard(_delete))
