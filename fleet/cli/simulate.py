"""``fleet simulate``: replay a job trace on the service's own loop, and size clusters for it.

Theory of operation: ``fleet simulate --clusters C --quota Q --trace T`` reads
the trace (:mod:`fleet.sim.traces`), replays it under one policy or, with
``--compare``, under each of several (:mod:`fleet.sim.engine`), and writes the
results (:mod:`fleet.sim.report`): with ``-o DIR`` the files of one replay in
``DIR`` or of each policy in ``DIR/<policy>/`` plus the comparison's table
(``DIR/compare.txt``) and plots; on stdout the summary (one policy) or the
table (a comparison).  ``--load F`` first rescales the trace's submission
times so that its offered load on the clusters is ``F``
(:mod:`fleet.sim.load`), printing the load before and after on stderr;
``--load A,B,...`` replays at each load in turn, each load's files in
``DIR/load-<F>/`` laid out as above, and prints each load's table and one
table of the figures by load (also ``DIR/compare.txt``, with the plot
``DIR/load.png``).  ``fleet simulate gen-clusters --trace T --format
philly|openb -o DIR`` writes ``DIR/clusters.yaml`` and ``DIR/quota.yaml``
sized from the trace's capacity hints (:mod:`fleet.sim.layout`).  Input that
cannot be used is one ``error:`` line per problem on stderr and exit status
1; nothing is written.  A progress line goes to stderr when it is a terminal.
``--from-live [URL] --quota NEW`` asks a running server (URL, else the one
:func:`fleet.cli.config.resolve` picks, with its token) what the proposed
tree would do, and prints its answer as NOW and PROPOSED columns under a
sentence saying what they count; a waiting job's change is judged at the
precision its times are printed (``same``, or by how much: ``12m sooner``).
The simulator is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any, Final, TextIO

from fleet.cli import config, remote
from fleet.cli.inputs import InputError, read_input
from fleet.core.digits import parse_digits
from fleet.service import columns

_UNTIL = re.compile(r"([0-9]+(?:\.[0-9]+)?)(s|m|h|d)?")
_UNIT: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_span(text: str) -> float:
    """Seconds of ``30d``, ``12h``, ``90m``, ``45s`` or a plain number of seconds."""
    match = _UNTIL.fullmatch(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text[:60]!r} is not a positive time span (examples: 30d, 12h, 90m, 3600)"
        )
    return float(match.group(1)) * _UNIT[match.group(2)]


def parse_loads(text: str) -> list[float]:
    """The loads of ``0.8`` or ``0.6,0.8,1.0``: positive numbers, each given once."""
    out: list[float] = []
    for part in text.split(","):
        try:
            value = float(part.strip())
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(
                f"{part.strip()[:60]!r} is not a positive load (examples: 0.8, or 0.6,0.8,1.0)"
            )
        if value in out:
            raise argparse.ArgumentTypeError(f"load {value:g} is given twice")
        out.append(value)
    return out


def _positive(text: str) -> int:
    value = parse_digits(text, low=1)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a positive whole number")
    return value


def add_parser(sub: Any, inputs: argparse.ArgumentParser) -> None:
    """Add ``simulate`` (and ``simulate gen-clusters``) to the ``fleet`` subcommands."""
    p = sub.add_parser(
        "simulate",
        help="replay a job trace on Fleet's scheduler in virtual time",
        description="Replay a job trace through Fleet's own scheduler loop, store and "
        "simulated member clusters on a virtual clock, and report per-job results, "
        "per-queue time series and a summary (queueing delay, completion time, GPU "
        "utilisation, fragmentation, preemptions).",
        parents=[inputs, config.server_options()],
    )
    p.add_argument("--clusters", metavar="FILE", help="MemberCluster file (simulated clusters)")
    p.add_argument("--quota", metavar="FILE", help="ElasticQuotaTree file")
    p.add_argument("--trace", metavar="FILE", help="the job trace to replay")
    p.add_argument(
        "--format",
        choices=("philly", "openb", "armada", "fleet"),
        default="philly",
        help="trace format: philly (philly_vc_jobs.csv), openb (Alibaba openb pod list), "
        "armada (Armada simulator workload YAML), fleet (submissions whose PyTorchJobs "
        "carry fleet.io/submit-time); default philly",
    )
    p.add_argument(
        "--policy",
        choices=("fleet", "capacity", "private", "fleet-no-memory"),
        default="fleet",
        help="fleet: cell allocator with elastic quota (default); capacity: the "
        "capacity-only placer with the same quota; private: every queue alone on its "
        "min, no borrowing; fleet-no-memory: fleet with every fairSharing.halfLife 0",
    )
    p.add_argument(
        "--compare",
        metavar="A,B,...",
        help="replay under each of these policies (e.g. fleet,capacity,private) and print "
        "a comparison table; overrides --policy",
    )
    p.add_argument(
        "--load",
        metavar="F[,F...]",
        type=parse_loads,
        help="scale the trace's submission times so that its offered load (GPU-seconds "
        "asked over the clusters' GPUs x the submission span) is F, keeping run times and "
        "order; several loads replay each in turn (e.g. 0.6,0.8,1.0)",
    )
    p.add_argument(
        "--until",
        metavar="SPAN",
        type=parse_span,
        help="stop the replay at this virtual time (30d, 12h, 90m or seconds); default: "
        "when every job has been submitted and nothing runs",
    )
    p.add_argument(
        "--limit",
        metavar="N",
        type=_positive,
        help="replay only the first N jobs of the trace (by submission time)",
    )
    p.add_argument(
        "--from-live",
        metavar="URL",
        nargs="?",
        const="",
        help="instead of a trace: ask the Fleet server (URL, else the one --server, "
        "--context, FLEET_SERVER or the config file names, with its token) what --quota (a "
        "proposed tree) would do to its live queue and running jobs (POST "
        "/api/v1/quota-tree?dryRun=Simulate); nothing is applied",
    )
    p.add_argument(
        "--horizon",
        metavar="SPAN",
        type=parse_span,
        default=86400.0,
        help="with --from-live: simulated time each forecast covers (default 24h)",
    )
    p.add_argument(
        "--sample-every",
        metavar="SPAN",
        type=parse_span,
        default=3600.0,
        help="virtual time between two samples of the queues (default 1h)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="DIR",
        help="write summary.json, jobs.csv and queues.csv here (with --compare: one "
        "directory per policy, compare.txt and PNG plots)",
    )
    p.set_defaults(handler=run)
    what = p.add_subparsers(
        dest="simulate_command", metavar="COMMAND", help="gen-clusters (optional; COMMAND --help)"
    )
    g = what.add_parser(
        "gen-clusters",
        help="size member clusters and a quota tree from a trace",
        description="Write DIR/clusters.yaml (a simulated MemberCluster with a HiveD cell "
        "config of 8-GPU nodes, one virtual cluster per queue) and DIR/quota.yaml (an "
        "ElasticQuotaTree with one leaf per queue: min its share, max twice that) from "
        "a trace's capacity hints.",
        parents=[inputs],
    )
    g.add_argument("--trace", metavar="FILE", required=True, help="the trace file")
    g.add_argument(
        "--format",
        choices=("philly", "openb"),
        required=True,
        help="philly: reads philly_vc_nodes_helios.csv beside the trace; openb: reads "
        "openb_node_list_gpu_node.csv beside the pod list",
    )
    g.add_argument("-o", "--output", metavar="DIR", required=True, help="where to write")
    g.add_argument(
        "--nodes",
        action="store_true",
        help="describe the member by its labelled nodes (spec.topology, spec.nodes, virtual "
        "clusters as requests) instead of a hand-written cell config",
    )
    g.set_defaults(handler=gen_clusters)


def _error(message: str) -> int:
    for line in message.splitlines():
        print(f"error: {line}", file=sys.stderr)
    return 1


def gen_clusters(args: argparse.Namespace) -> int:
    layout = importlib.import_module("fleet.sim.layout")
    traces = importlib.import_module("fleet.sim.traces")
    try:
        result = layout.generate(Path(args.trace), args.format, args.nodes)
    except traces.TraceError as e:
        return _error(str(e))
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "clusters.yaml").write_text(result.clusters, encoding="utf-8")
    (out / "quota.yaml").write_text(result.quota, encoding="utf-8")
    print(f"wrote {out / 'clusters.yaml'} and {out / 'quota.yaml'}")
    return 0


class _Progress:
    """A progress line on ``stream`` (a terminal), at most a few times a second."""

    def __init__(self, policy: str, stream: TextIO) -> None:
        self.policy = policy
        self.stream = stream
        self.started = time.monotonic()
        self.shown = 0.0

    def __call__(self, done: int, total: int, now: float) -> None:
        wall = time.monotonic()
        if wall - self.shown < 0.25 and done < total:
            return
        self.shown = wall
        rate = done / max(wall - self.started, 1e-9)
        width = 30
        filled = int(width * done / max(total, 1))
        self.stream.write(
            f"\r{self.policy:<9} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} jobs "
            f"submitted, day {now / 86400:.1f}, {rate:,.0f} jobs/s "
        )
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def _when(value: str | None) -> str:
    """A time of the server's as ``YYYY-MM-DD HH:MM:SS`` (UTC), to the second."""
    return "-" if value is None else value.replace("T", " ").split(".")[0].split("+")[0].rstrip("Z")


def _wait(value: float | None) -> str:
    return "-" if value is None else columns.duration(value)


def from_live(args: argparse.Namespace) -> int:
    """``--from-live URL --quota NEW``: the server's dry run of a proposed tree, as tables."""
    if args.quota is None:
        return _error("fleet simulate --from-live needs --quota (the proposed tree)")
    try:
        body = read_input(args.quota, args.max_input_size).encode("utf-8")
    except InputError as e:
        return _error(str(e))
    path = f"/api/v1/quota-tree?dryRun=Simulate&horizon={max(60, round(args.horizon))}"
    try:
        where = config.resolve(args.from_live or args.server, args.token, args.context)
        server = remote.Server(where.url, where.token)
        _, result = remote.request(server, "POST", path, body, "application/yaml")
    except config.ConfigError as e:
        return _error(str(e))
    except remote.RemoteError as e:
        return _error(str(e))
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        (out / "what-if.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    rows: list[tuple[object, ...]] = [
        (j["job"], j["queue"], _when(j["current"]), _when(j["proposed"]), _change(j))
        for j in result["jobs"]
    ]
    print(
        "Waiting jobs: when each should start (UTC) with the tree in force (NOW) and with "
        f"the proposed tree (PROPOSED); {result['assumes']}"
    )
    print(columns.table(("JOB", "QUEUE", "NOW", "PROPOSED", "CHANGE"), rows))
    if result["preempted"]:
        rows = [(p["job"], p["current"], p["proposed"]) for p in result["preempted"]]
        print(
            "\nRunning jobs preempted within the forecast: how many times each is preempted "
            "with the tree in force (NOW) and with the proposed tree (PROPOSED)"
        )
        print(columns.table(("JOB", "NOW", "PROPOSED"), rows))
    rows = [
        (q["name"], _wait(q["currentWaitSeconds"]), _wait(q["proposedWaitSeconds"]))
        for q in result["queues"]
    ]
    print(
        "\nExpected wait per queue: the mean over its waiting jobs that start within the "
        "forecast, with the tree in force (NOW) and with the proposed tree (PROPOSED)"
    )
    print(columns.table(("QUEUE", "NOW", "PROPOSED"), rows))
    return 0


def _change(job: dict[str, Any]) -> str:
    """How the proposal moves a job's start, judged at the precision the times are shown:
    two times that print the same are ``same``, others say by how much."""
    current, proposed = job["current"], job["proposed"]
    if current is None or proposed is None:
        return str(job["change"])  # starts, no longer starts, or same (neither starts)
    if _when(current) == _when(proposed):
        return "same"
    shown = [
        datetime.datetime.fromisoformat(_when(t).replace(" ", "T") + "+00:00")
        for t in (current, proposed)
    ]
    seconds = (shown[1] - shown[0]).total_seconds()
    return f"{columns.duration(abs(seconds))} {'later' if seconds > 0 else 'sooner'}"


def _day(seconds: float) -> str:
    return f"{seconds / 86400:,.2f} d"


def run(args: argparse.Namespace) -> int:
    if args.simulate_command is not None:  # pragma: no cover - argparse dispatches
        return int(args.handler(args))
    if args.from_live is not None:
        if args.load is not None:
            return _error("--load scales a trace; --from-live replays no trace")
        return from_live(args)
    missing = [f"--{n}" for n in ("clusters", "quota", "trace") if getattr(args, n) is None]
    if missing:
        return _error(f"fleet simulate needs {', '.join(missing)} (see fleet simulate --help)")
    traces = importlib.import_module("fleet.sim.traces")
    policies = importlib.import_module("fleet.sim.policies")
    engine = importlib.import_module("fleet.sim.engine")
    load = importlib.import_module("fleet.sim.load")
    report = importlib.import_module("fleet.sim.report")
    convert = importlib.import_module("fleet.manifests.convert")
    errors = importlib.import_module("fleet.manifests.errors")
    try:
        names = policies.check(
            [n.strip() for n in args.compare.split(",")] if args.compare else [args.policy]
        )
        size = args.max_input_size
        tree_text = read_input(args.quota, size)
        clusters_text = read_input(args.clusters, size)
        trace_text = read_input(args.trace, size)
    except (InputError, policies.PolicyError) as e:
        return _error(str(e))
    try:
        tree, _ = convert.load_quota(tree_text)
    except errors.SpecError as e:
        return _error("\n".join(f"{args.quota}: {issue}" for issue in e.issues))
    try:
        clusters = convert.load_clusters(clusters_text)
    except errors.SpecError as e:
        return _error("\n".join(f"{args.clusters}: {issue}" for issue in e.issues))
    try:
        if args.format == "fleet":
            jobs = traces.read_fleet(trace_text, tree, clusters, args.trace)
        else:
            jobs = traces.READERS[args.format](trace_text, args.trace)
    except traces.TraceError as e:
        return _error(str(e))
    if args.limit is not None:
        jobs = jobs[: args.limit]
    # Each load's jobs, all scaled before any replay runs (a load that cannot be is an error).
    runs: dict[float | None, Any] = {}
    if args.load is None:
        runs[None] = jobs
    else:
        gpus = engine.cluster_gpus(clusters)
        for target in args.load:
            try:
                runs[target], done = load.scaled(jobs, gpus, target)
            except traces.TraceError as e:
                return _error(str(e))
            print(
                f"load {target:g}: offered load {done.before:.3f} -> {done.after:.3f} "
                f"(submissions over {_day(done.span_before)} -> {_day(done.span_after)})",
                file=sys.stderr,
            )
    by_load: dict[float | None, list[Any]] = {}
    for target, scaled in runs.items():
        replays = by_load.setdefault(target, [])
        for name in names:
            progress = _Progress(name, sys.stderr) if sys.stderr.isatty() else None
            try:
                replays.append(
                    engine.run(
                        scaled,
                        tree_text,
                        clusters_text,
                        name,
                        until=args.until,
                        sample_every=args.sample_every,
                        progress=progress,
                    )
                )
            except traces.TraceError as e:
                return _error(str(e))
            finally:
                if progress is not None:
                    progress.close()
    out = Path(args.output) if args.output else None
    several = len(by_load) > 1
    summaries: dict[float | None, dict[str, Any]] = {}
    texts: list[str] = []
    for target, replays in by_load.items():
        where = out
        if out is not None and several:
            where = out / f"load-{target:g}"
        summaries[target] = {}
        for r in replays:
            if where is None:
                summaries[target][r.policy] = report.summary(r)
            else:
                directory = where / r.policy if args.compare else where
                summaries[target][r.policy] = report.write(r, directory)
        if not args.compare and not several:
            print(json.dumps(summaries[target][names[0]], indent=2))
            return 0
        table = report.compare_table(summaries[target])
        texts.append(f"Load {target:g}\n{table}" if several else table)
        if where is not None and args.compare:
            if several:
                (where / "compare.txt").write_text(table, encoding="utf-8")
            for path in report.plot(replays, where):
                print(f"wrote {path}", file=sys.stderr)
    if several:
        loads = {t: s for t, s in summaries.items() if t is not None}
        texts.append(report.load_table(loads))
    text = "\n".join(texts)
    print(text, end="")
    if out is not None:
        (out / "compare.txt").write_text(text, encoding="utf-8")
        if several:
            for path in report.plot_loads(loads, out):
                print(f"wrote {path}", file=sys.stderr)
    return 0
