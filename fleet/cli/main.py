"""The ``fleet`` command line: offline checks and plans of Fleet's YAML objects.

Theory of operation: :func:`main` parses ``argv`` with argparse and dispatches
to one handler per subcommand; each handler returns the process exit code and
never calls ``sys.exit`` itself, so tests call ``main([...])`` directly.

``fleet check quota|jobs|clusters FILE`` loads a file with the same loaders the
server uses (:mod:`fleet.manifests`), prints every error (document index and field
path) and every warning (prefixed ``warning:``) on stderr, a one-line ``OK``
summary on stdout when there is no error, and exits 1 on any error.
``check quota`` with ``--clusters`` also warns, one line per resource, where
the tree guarantees more than the clusters hold (:mod:`fleet.core.inventory`,
every node healthy): a warning, as the server's answer is a report, so the
exit status stays 0.  ``check jobs`` routes jobs with ``--quota`` and, with ``--clusters``, checks
cluster affinity, the kinds each member runs, GPU types and the server's fit
test (:mod:`fleet.manifests.fit`: a resource no node offers, a pod no node
holds, a gang no cluster holds), all through the server's own functions.  Input files are read by
:mod:`fleet.cli.inputs`: a file that cannot be used (missing, a directory,
larger than ``--max-input-size``, not UTF-8) is one plain error line naming
it, for ``plan`` too, and a file above the size limit is never parsed.
``fleet plan`` is implemented in :mod:`fleet.cli.plan`, imported lazily.
``fleet --version`` and ``fleet version`` print the installed package's
version; ``fleet completion bash|zsh`` a completion script generated from the
parser built here (:mod:`fleet.cli.completion`).  The commands that talk to a
server are in :mod:`fleet.cli.remote` (their tables in :mod:`fleet.cli.views`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import select
import sys
from collections.abc import Callable, Sequence

from fleet.cli import completion, config, remote, serve, simulate, tokens
from fleet.cli.inputs import (
    DEFAULT_MAX_INPUT_SIZE,
    InputError,
    parse_size,
    read_input,
)
from fleet.core import inventory, quota
from fleet.core.resources import Resources, format_quantity
from fleet.manifests import convert
from fleet.manifests.errors import SpecError, SpecIssue
from fleet.manifests.models import MemberClusterModel


def _read(path: str, max_size: int) -> str | None:
    """The file's text, or None after saying on stderr why it cannot be used."""
    try:
        return read_input(path, max_size)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return None


def _report(path: str, issues: Sequence[SpecIssue]) -> int:
    for issue in issues:
        print(f"error: {path}: {issue}", file=sys.stderr)
    return 1 if issues else 0


def _warn(path: str, warnings: Sequence[str]) -> None:
    for w in warnings:
        print(f"warning: {path}: {w}", file=sys.stderr)


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    if word.endswith("y") and word[-2:-1] not in ("a", "e", "o", "u"):
        return f"{n} {word[:-1]}ies"
    return f"{n} {word}s"


def _load_tree(path: str, max_size: int) -> tuple[quota.QuotaTree | None, int]:
    text = _read(path, max_size)
    if text is None:
        return None, 1
    try:
        tree, warnings = convert.load_quota(text)
    except SpecError as e:
        return None, _report(path, e.issues)
    _warn(path, warnings)
    return tree, 0


def _load_clusters(path: str, max_size: int) -> tuple[list[MemberClusterModel] | None, int]:
    text = _read(path, max_size)
    if text is None:
        return None, 1
    try:
        return convert.load_clusters(text), 0
    except SpecError as e:
        return None, _report(path, e.issues)


def _check_quota(args: argparse.Namespace) -> int:
    tree, rc = _load_tree(args.file, args.max_input_size)
    if tree is None:
        return rc or 1
    warnings = len(tree.warnings)
    capacity = ""
    if args.clusters is not None:
        clusters, rc = _load_clusters(args.clusters, args.max_input_size)
        if clusters is None:
            return rc or 1
        unknown = [c.name for c in clusters if _watched(c)]
        if unknown:
            _warn(
                args.clusters,
                [
                    f"member cluster {name} is described by its Node objects: its capacity "
                    "is known to the running service only and is not counted here"
                    for name in unknown
                ],
            )
            warnings += len(unknown)
        counted = {c.name: c.cell_config() for c in clusters if c.name not in unknown}
        held = inventory.inventory(counted)
        root = tree.to_spec()
        short = inventory.overpromised(inventory.spec_guarantees(root), held)
        for s in short:
            _warn(args.file, [f"the tree promises more than the member clusters hold: {s}"])
        warnings += len(short)
        if root.auto:
            figures = ", ".join(f"{r} {quantity}" for r, quantity in _quantities(held.limits()))
            capacity = f"; capacity: auto ({figures or 'nothing'})"
    elif tree.auto:
        capacity = "; capacity: auto (give --clusters to see the figures)"
    leaves = tree.leaves()
    warned = _plural(warnings, "warning")
    print(
        f"OK: {args.file}: quota tree with {_plural(len(tree.nodes()), 'node')}, "
        f"{_plural(len(leaves), 'leaf queue')} ({', '.join(leaves)}){capacity}; {warned}"
    )
    return 0


def _watched(cluster: MemberClusterModel) -> bool:
    """A real member whose cells come from its Node objects, none of them in the file."""
    spec = cluster.spec
    observed = cluster.status is not None and bool(cluster.status.nodes)
    return spec.kubeconfig is not None and spec.built and not observed


def _quantities(values: Resources) -> list[tuple[str, str]]:
    return [(r, format_quantity(r, v)) for r, v in sorted(values.items())]


def _check_clusters(args: argparse.Namespace) -> int:
    clusters, rc = _load_clusters(args.file, args.max_input_size)
    if clusters is None:
        return rc or 1
    names = ", ".join(c.name for c in clusters)
    print(f"OK: {args.file}: {_plural(len(clusters), 'member cluster')} ({names})")
    return 0


def _check_jobs(args: argparse.Namespace) -> int:
    tree: quota.QuotaTree | None = None
    if args.quota is not None:
        tree, rc = _load_tree(args.quota, args.max_input_size)
        if tree is None:
            return rc or 1
    clusters: list[MemberClusterModel] = []
    if args.clusters is not None:
        clusters_text = _read(args.clusters, args.max_input_size)
        if clusters_text is None:
            return 1
        try:
            clusters = convert.load_clusters(clusters_text)
        except SpecError as e:
            return _report(args.clusters, e.issues)
    text = _read(args.file, args.max_input_size)
    if text is None:
        return 1
    n_jobs, n_policies, issues = convert.check_submission(text, tree, clusters)
    if issues:
        return _report(args.file, issues)
    _warn(args.file, [str(w) for w in convert.submission_warnings(text)])
    routed = "queues routed" if tree is not None else "queues not routed (no --quota)"
    print(
        f"OK: {args.file}: {_plural(n_jobs, 'job')}, "
        f"{_plural(n_policies, 'PropagationPolicy')}; {routed}"
    )
    return 0


def _plan(args: argparse.Namespace) -> int:
    # Unusable files (missing, a directory, too large, not UTF-8) are refused
    # here, each with its path, before the planner reads them.
    for path in (args.quota, args.clusters, args.jobs, args.running):
        if path is not None and _read(path, args.max_input_size) is None:
            return 1
    # Lazy: the planner pulls in the whole core, and `check` must not need it.
    plan = importlib.import_module("fleet.cli.plan")
    run: Callable[[argparse.Namespace], int] = plan.run
    return run(args)


def version() -> str:
    """The installed package's version (``importlib.metadata``)."""
    try:
        return importlib.metadata.version("fleet")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (the package is not installed)"


def _inputs_parent() -> argparse.ArgumentParser:
    """The option every subcommand that reads files takes."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--max-input-size",
        metavar="SIZE",
        type=parse_size,
        default=DEFAULT_MAX_INPUT_SIZE,
        help="refuse, before parsing, an input file larger than SIZE: bytes, or a number "
        f"with KiB, MiB or GiB (default: {DEFAULT_MAX_INPUT_SIZE // 1024**2}MiB)",
    )
    return parent


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleet", description="Multi-cluster queueing and quota federation for GPU jobs."
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {version()}",
        help="print Fleet's version and exit",
    )
    inputs = _inputs_parent()
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do (COMMAND --help)"
    )

    check = sub.add_parser(
        "check",
        help="validate YAML files offline",
        description="Validate a YAML file offline: every error with its document index and "
        "field path on stderr, exit status 1 on any error (warnings do not fail).",
    )
    what = check.add_subparsers(
        dest="what", required=True, metavar="OBJECTS", help="what the file holds"
    )
    q = what.add_parser("quota", help="an ElasticQuotaTree file", parents=[inputs])
    q.add_argument("file", metavar="FILE", help="YAML file with exactly one ElasticQuotaTree")
    q.add_argument(
        "--clusters",
        metavar="CLUSTERS",
        help="MemberCluster file: warn where the tree guarantees more than these clusters "
        "hold (per resource and GPU type, every node healthy), and show the figures of a "
        "root of capacity: auto",
    )
    q.set_defaults(handler=_check_quota)
    j = what.add_parser(
        "jobs", help="jobs and PropagationPolicies (a submission)", parents=[inputs]
    )
    j.add_argument("file", metavar="FILE", help="YAML file of jobs and PropagationPolicies")
    j.add_argument(
        "--quota",
        metavar="TREE",
        help="ElasticQuotaTree file: route every job to a leaf queue of this tree",
    )
    j.add_argument(
        "--clusters",
        metavar="CLUSTERS",
        help="MemberCluster file: check cluster affinity, kinds, GPU types and that every "
        "job fits (resources its nodes offer, pod and gang sizes) against these clusters",
    )
    j.set_defaults(handler=_check_jobs)
    c = what.add_parser("clusters", help="a MemberCluster file", parents=[inputs])
    c.add_argument(
        "file", metavar="FILE", help="YAML file of MemberClusters (names must be unique)"
    )
    c.set_defaults(handler=_check_clusters)

    p = sub.add_parser(
        "plan",
        help="offline: what the scheduler would do with these jobs",
        description="Run the scheduling cycle offline: the jobs of --running are scheduled "
        "first, then the jobs of --jobs are submitted in document order; print which jobs "
        "start where (node and GPU indices per replica), which running jobs are preempted "
        "and why the rest wait.",
        parents=[inputs],
    )
    p.add_argument(
        "--quota",
        metavar="TREE",
        required=True,
        help="ElasticQuotaTree file: the queues with their min and max quota",
    )
    p.add_argument(
        "--clusters",
        metavar="CLUSTERS",
        required=True,
        help="MemberCluster file: the member clusters with their HiveD cell configs",
    )
    p.add_argument(
        "--jobs",
        metavar="JOBS",
        required=True,
        help="jobs and PropagationPolicies to submit, in document order",
    )
    p.add_argument(
        "--running",
        metavar="RUNNING",
        help="jobs (and PropagationPolicies) that are already running, in the same "
        "format as --jobs: they are scheduled first, in document order, and the jobs of "
        "--jobs may preempt them; a job may not be in both files; their placements are "
        "computed, not read",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="table: readable columns (default); json: one document with admitted, "
        "preempted, waiting and queues",
    )
    p.add_argument(
        "--placer",
        choices=("cells", "capacity"),
        default="cells",
        help="cells: the topology-aware HiveD-style cell allocator (default); "
        "capacity: the capacity-only baseline",
    )
    p.set_defaults(handler=_plan)
    serve.add_parser(sub)
    remote.add_parsers(sub)
    tokens.add_parser(sub)
    config.add_parser(sub)
    simulate.add_parser(sub, inputs)
    v = sub.add_parser(
        "version",
        help="print the client's and the server's versions",
        description="Print the version of this fleet command and, unless --client, the "
        "version of the server it talks to (its /healthz; unreachable is said, not an error).",
        epilog="examples:\n  fleet version\n  fleet version --client\n"
        "  fleet version --context prod",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[config.server_options()],
    )
    v.add_argument("--client", action="store_true", help="the client's version only")
    v.set_defaults(handler=_version)
    done = sub.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description="Print a completion script for bash or zsh: subcommands, kinds, "
        "options and their choices, generated from this command line's parser.",
        epilog="examples:\n"
        "  source <(fleet completion bash)\n"
        '  fleet completion zsh > "${fpath[1]}/_fleet"',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    done.add_argument("shell", choices=("bash", "zsh"), help="the shell")
    done.set_defaults(handler=lambda args: _completion(parser, args))
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, (description, example) in _EXPLAINED.items():
        command = commands.choices[name]
        command.description = command.description or description
        command.epilog = "examples:\n" + example
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


#: Descriptions (where the command has none) and examples of the commands whose
#: parsers are built elsewhere without them.
_EXPLAINED: dict[str, tuple[str, str]] = {
    "check": (
        "",
        "  fleet check quota policies/quota/team-tree.yaml --clusters "
        "policies/clusters/example.yaml\n"
        "  fleet check jobs policies/jobs/quickstart.yaml --quota policies/quota/team-tree.yaml",
    ),
    "plan": (
        "",
        "  fleet plan --quota policies/quota/team-tree.yaml --clusters "
        "policies/clusters/example.yaml --jobs policies/jobs/quickstart.yaml",
    ),
    "serve": (
        "",
        "  fleet serve                                   # SQLite ./fleet.db, simulated members\n"
        "  fleet serve --port 9090 --tokens-file tokens.yaml --log-format json",
    ),
    "token": (
        "Manage the bearer tokens of a tokens file: create one (printed once), list them, "
        "revoke one.",
        "  fleet token create alice --role team --queue team-a --tokens-file tokens.yaml\n"
        "  fleet token list --tokens-file tokens.yaml\n"
        "  fleet token revoke alice --tokens-file tokens.yaml",
    ),
    "config": (
        "",
        "  fleet config set-context prod --server fleet.example.com:8080 "
        "--token-file ~/.fleet/prod-token\n"
        "  fleet config use-context prod\n"
        "  fleet config get-contexts",
    ),
    "simulate": (
        "",
        "  fleet simulate gen-clusters --trace data/traces/philly-vc/philly_vc_jobs.csv "
        "--format philly -o philly\n"
        "  fleet simulate --clusters philly/clusters.yaml --quota philly/quota.yaml \\\n"
        "      --trace data/traces/philly-vc/philly_vc_jobs.csv --compare fleet,capacity "
        "--limit 2000 -o out\n"
        "  fleet simulate --from-live --quota proposed-tree.yaml --horizon 24h",
    ),
}


def _version(args: argparse.Namespace) -> int:
    print(f"Client Version: fleet {version()}")
    if args.client:
        return 0
    try:
        server = remote.server_of(args)
        status, body = remote.request(server, "GET", "/healthz")
    except remote.RemoteError as e:
        print(f"Server Version: unknown ({e})")
        return 0
    shown = body.get("version") if status == 200 and isinstance(body, dict) else None
    print(f"Server Version: fleet {shown} at {server.url}" if shown else "Server Version: unknown")
    return 0


def _completion(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    print(completion.script(parser, args.shell), end="")
    return 0


#: The exit status of a command whose reader went away: a process that SIGPIPE
#: ended (128 + 13), as ``ls | head`` leaves ``ls``.
READER_GONE = 141


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except BrokenPipeError:
        if not _stdout_broken():
            raise  # another pipe or socket: not ours to hide
        return READER_GONE


def _stdout_broken() -> bool:
    """Whether standard output's reader went away (``fleet get jobs | head``: its
    pipe polls as an error); if so, what is still buffered for it goes nowhere, so
    that the exit does not complain."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        ready = poller.poll(0)
    except (AttributeError, OSError, ValueError):  # no poll(), or no file behind stdout
        return False
    if not any(events & (select.POLLERR | select.POLLHUP) for _, events in ready):
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return True


if __name__ == "__main__":
    sys.exit(main())
