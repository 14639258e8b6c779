"""Jobs applied to a real hub cluster, and the same jobs through Fleet's HTTP door.

Theory of operation: each run starts, in a directory of its own, a hub
(:func:`tests.hub.cluster.start_hub`: etcd and kube-apiserver set up from
``deploy/hub``, as the tests' ``hub`` fixture is, with the team ``team-a``),
two member control planes (``alpha`` and ``beta``) holding only the
PyTorchJob CRD, Fleet's RBAC, the namespace ``team-a`` and ``--nodes`` Nodes
of 8 GPUs each (no operator, no KWOK: Fleet's part ends at the member object
created, and the jobs stay Dispatched), and ``fleet serve`` on a SQLite file
with both members, a quota tree whose ``min`` is every GPU, and
``--hub-kubeconfig`` with Fleet's service account (the role ``fleet-hub``
alone).  Watches (one stream each, never polling) record when each hub
PyTorchJob first shows the condition ``Admitted`` and then ``Dispatched``,
and when each member's PyTorchJob is first seen.  Then ``--jobs`` jobs of
one 1-GPU pod are applied by ``--clients`` threads at once (urllib, one
request per job):

* door ``hub``: a PropagationPolicy (``policy.karmada.io``) selecting them is
  created on the hub first (and waited for in Fleet's ``/api/v1/policies``),
  then each job is POSTed to the hub as its admin; "applied" is the hub's
  answer;
* door ``http``: the same policy is stored through ``POST
  /api/v1/submissions`` alone, then each job is one submission; "applied"
  is Fleet's answer, and "Admitted" the time of the job's ``Admitted`` entry
  in Fleet's event log (read from its database at the end); Fleet also shows
  these jobs on the hub, as objects it creates there, and their writes are
  counted in the hub's figures.

A run ends when every job is admitted and in its member (and, on the hub,
shows ``Dispatched``); CPU is read then.  Printed per door (medians of
``--runs`` runs; each run's own line too):

* jobs/s from the first apply to the last Admitted, and to the last member
  object created;
* per job: applied -> Admitted and applied -> member object created, p50
  and p99; beside them Fleet's own decision, applied -> the ``Admitted``
  entry of its event log;
* CPU seconds of ``fleet serve`` (``/proc/PID/stat`` utime + stime, before
  the first apply and at the end) and per job in ms; CPU seconds of the API
  servers and etcds (hub and members), and of this process (the clients and
  watches), beside the wall time;
* the correctness line: every job has exactly one member object, and on the
  hub every job holds Fleet's finalizer and an Admitted condition (door
  ``http``: every job Dispatched in Fleet) - ``OK`` or ``MISMATCH``;
* the target line.

``--profile FILE`` runs ``fleet serve`` under ``cProfile`` (one run of the
first door, written to FILE when it stops).  The figures are printed, never
asserted.

    .venv/bin/python bench/bench_hub.py [--jobs N] [--clients C] [--runs R] [--door hub,http]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from fleet.clusters.base import member_object_name
from fleet.hub.objects import FINALIZER
from fleet.testing import servers
from fleet.testing.servers import cpu_seconds
from tests.hub.cluster import Hub, one_pod_job, start_hub
from tests.kube.conftest import Fleet, member_document
from tests.kube.controlplane import Admin, ControlPlane, binaries, wait_for

MEMBERS = ("alpha", "beta")
NODES = 64
GPUS = 8
NAMESPACE = "team-a"
LABEL = "bench"
PYTORCHJOBS = "/apis/kubeflow.org/v1/pytorchjobs"
TARGET = "target: >= 200 jobs/s, p99 apply -> admitted <= 2 s on this machine"

POLICY: dict[str, Any] = {
    "apiVersion": "policy.karmada.io/v1alpha1",
    "kind": "PropagationPolicy",
    "metadata": {"name": "bench", "namespace": NAMESPACE},
    "spec": {
        "resourceSelectors": [
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "labelSelector": {"matchLabels": {LABEL: "hub"}},
            }
        ]
    },
}


def quota(gpus: int) -> str:
    return f"""\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {{name: bench}}
spec:
  root:
    name: root
    min: {{nvidia.com/gpu: {gpus}}}
    children:
      - name: team-a
        min: {{nvidia.com/gpu: {gpus}}}
        namespaces: [{NAMESPACE}]
"""


def job_object(name: str) -> dict[str, Any]:
    """A PyTorchJob of one 1-GPU pod, labelled for the bench's policy."""
    return one_pod_job(name, NAMESPACE, {LABEL: "hub"})


class HubFleet(Fleet):
    """``fleet serve`` that also serves the hub, as Fleet's service account."""

    def __init__(
        self, tmp: Path, documents: list[dict[str, Any]], hub: Hub, quota: str, profile: Path | None
    ) -> None:
        super().__init__(tmp, documents, quota)
        self.hub_kubeconfig = hub.kubeconfig_for_fleet()
        self.profile = profile

    def start(self) -> HubFleet:
        python_args = ("-m", "cProfile", "-o", str(self.profile)) if self.profile else ()
        self.proc = servers.start(
            self.database_url, self.port, self.log, extra=self.files(), python_args=python_args
        )
        return self

    def files(self) -> list[str]:
        return [*super().files(), "--hub-kubeconfig", str(self.hub_kubeconfig)]


class Watch:
    """A watch of PyTorchJobs in one API server, calling ``fn(obj, now)`` per event; a
    stream the server ends or drops is resumed from its last resourceVersion."""

    def __init__(self, admin: Admin, fn: Callable[[dict[str, Any], float], None]) -> None:
        self.admin = admin
        self.fn = fn
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.resumed = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        admin = self.admin
        context = ssl.create_default_context(cafile=str(admin.ca_file))
        version = ""
        while not self.stop.is_set():
            since = f"&resourceVersion={version}" if version else ""
            req = urllib.request.Request(
                f"{admin.url}{PYTORCHJOBS}?watch=true&allowWatchBookmarks=true"
                f"&timeoutSeconds=3600{since}"
            )
            req.add_header("Authorization", f"Bearer {admin.token}")
            try:
                with urllib.request.urlopen(req, context=context) as resp:
                    self.ready.set()
                    for line in resp:
                        if self.stop.is_set():
                            return
                        event = json.loads(line)
                        if event["type"] == "ERROR":  # 410 Gone: start again from now
                            version = ""
                            break
                        obj = event["object"]
                        version = obj["metadata"].get("resourceVersion") or version
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self.fn(obj, time.time())
            except OSError:
                time.sleep(0.1)
            self.resumed += 1


@dataclass
class Seen:
    """First times seen by the watches, by job name."""

    admitted: dict[str, float] = field(default_factory=dict)  # on the hub
    dispatched: dict[str, float] = field(default_factory=dict)  # on the hub
    created: dict[str, dict[str, float]] = field(default_factory=dict)  # member -> name -> time
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hub(self, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        kinds = {c.get("type") for c in (obj.get("status") or {}).get("conditions") or []}
        with self.lock:
            if "Admitted" in kinds:
                self.admitted.setdefault(name, now)
            if "Dispatched" in kinds:
                self.dispatched.setdefault(name, now)

    def member(self, member: str) -> Callable[[dict[str, Any], float], None]:
        created = self.created.setdefault(member, {})

        def fn(obj: dict[str, Any], now: float) -> None:
            with self.lock:
                created.setdefault(obj["metadata"]["name"], now)

        return fn

    def created_at(self, object_name: str) -> float | None:
        with self.lock:
            found = [c[object_name] for c in self.created.values() if object_name in c]
        return min(found) if found else None


def quantiles(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


@dataclass
class Figures:
    door: str
    admitted_rate: float
    created_rate: float
    admitted_p50: float
    admitted_p99: float
    created_p50: float
    created_p99: float
    decided_p50: float
    decided_p99: float
    applied_rate: float
    cpu_fleet: float
    cpu_planes: float
    cpu_hub: float
    writes: dict[str, float]
    cpu_bench: float
    wall: float
    ok: bool
    detail: str

    def line(self) -> str:
        return (
            f"{self.door}: {self.admitted_rate:.1f} jobs/s admitted, {self.created_rate:.1f} "
            f"created; admitted p50/p99 {self.admitted_p50:.2f}/{self.admitted_p99:.2f} s, "
            f"created {self.created_p50:.2f}/{self.created_p99:.2f} s; CPU fleet "
            f"{self.cpu_fleet:.1f} s, API servers+etcd {self.cpu_planes:.1f} s (hub "
            f"{self.cpu_hub:.1f} s), wall "
            f"{self.wall:.1f} s; {'OK' if self.ok else 'MISMATCH'} ({self.detail})"
        )


def hub_writes(hub: Hub) -> dict[str, int]:
    """The hub's writes so far, from its ``apiserver_request_total``: ``VERB resource[/sub]``
    -> requests (any answer), for job objects and Events."""
    counts: dict[str, int] = {}
    text = hub.admin.get("/metrics")
    for line in str(text).splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line.rpartition(" ")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
        verb, resource, sub = labels["verb"], labels["resource"], labels["subresource"]
        if verb in ("POST", "PATCH", "PUT", "DELETE") and resource in ("pytorchjobs", "events"):
            key = f"{verb} {resource}{'/' + sub if sub else ''}"
            counts[key] = counts.get(key, 0) + int(float(value))
    return counts


def event_log_admitted(database: Path) -> dict[str, float]:
    """Job name -> the time of its first ``Admitted`` entry in Fleet's event log."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT j.name, min(e.time) FROM job_events e JOIN jobs j ON j.id = e.job_id "
            "WHERE e.reason = 'Admitted' GROUP BY j.name"
        ).fetchall()
    return {str(name): float(t) for name, t in rows}


def run(
    door: str, args: argparse.Namespace, bin_dir: Path, root: Path, profile: Path | None
) -> Figures:
    root.mkdir(parents=True)
    planes: list[ControlPlane] = []
    watches: list[Watch] = []
    fleet: HubFleet | None = None
    try:
        hub = start_hub(bin_dir, root / "hub", teams=(NAMESPACE,))
        planes.append(hub.plane)
        documents = []
        for member in MEMBERS:
            plane = ControlPlane(member, bin_dir, root)
            planes.append(plane)
            plane.start()
            plane.install_crd()
            plane.install_rbac()
            plane.namespace(NAMESPACE)
            names = [f"{member}-node-{i}" for i in range(args.nodes)]
            for name in names:
                plane.add_node(name, GPUS)
            doc = member_document(member, plane.kubeconfig(), member)
            pool = doc["spec"]["cells"]["physicalCluster"]
            pool["cellTypes"]["GPU-NODE"]["childCellNumber"] = GPUS
            pool["cellTypes"]["GPU-POOL"]["childCellNumber"] = args.nodes
            pool["physicalCells"][0]["cellChildren"] = [{"cellAddress": n} for n in names]
            documents.append(doc)
        seen = Seen()
        watches.append(Watch(hub.admin, seen.hub))
        for member, plane in zip(MEMBERS, planes[1:], strict=True):
            watches.append(Watch(plane.admin, seen.member(member)))
        for w in watches:
            assert w.ready.wait(30), "a watch did not start"
        gpus = len(MEMBERS) * args.nodes * GPUS
        (root / "fleet").mkdir()
        fleet = HubFleet(root / "fleet", documents, hub, quota(gpus), profile).start()
        assert fleet.proc is not None

        # The standing policy, in the door's own way.
        if door == "hub":
            hub.admin.request("POST", f"/apis/policy.karmada.io/v1alpha1/namespaces/{NAMESPACE}"
                              "/propagationpolicies", POLICY)  # fmt: skip
        else:
            fleet.submit(yaml.safe_dump(POLICY))
        wait_for(
            lambda: fleet.request("GET", "/api/v1/policies")["items"],
            "the policy stored",
            30,
        )
        time.sleep(1.0)  # the members' and the hub's first lists

        pids = {"fleet": fleet.proc.pid}
        for plane in planes:
            for p in (plane.apiserver, plane.etcd):
                if p is not None:
                    pids[f"{plane.name}-{p.pid}"] = p.pid
        cpu_before = {k: cpu_seconds(pid) for k, pid in pids.items()}
        writes_before = hub_writes(hub)
        own_before = sum(os.times()[:2])

        jobs = [f"job-{i:04d}" for i in range(args.jobs)]
        applied: dict[str, float] = {}
        bodies = {job: job_object(job) for job in jobs}
        collection = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs"
        texts = {job: yaml.safe_dump(bodies[job]) for job in jobs}

        def apply(job: str) -> None:
            if door == "hub":
                hub.admin.request("POST", collection, bodies[job])
            else:
                fleet.submit(texts[job])
            applied[job] = time.time()

        objects = {job: member_object_name(f"{NAMESPACE}/{job}") for job in jobs}
        first = time.time()
        wall = time.monotonic()
        with ThreadPoolExecutor(args.clients) as pool_:
            list(pool_.map(apply, jobs))
        applying = time.monotonic() - wall

        def done() -> bool:
            if any(seen.created_at(objects[j]) is None for j in jobs):
                return False
            return door != "hub" or len(seen.dispatched) >= args.jobs

        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and not done():
            time.sleep(0.05)
        elapsed = time.monotonic() - wall
        cpu_after = {k: cpu_seconds(pid) for k, pid in pids.items()}
        cpu_bench = sum(os.times()[:2]) - own_before
        cpu_fleet = cpu_after["fleet"] - cpu_before["fleet"]
        cpu_planes = sum(cpu_after[k] - cpu_before[k] for k in pids if k != "fleet")
        cpu_hub = sum(cpu_after[k] - cpu_before[k] for k in pids if k.startswith("hub-"))

        writes_after = hub_writes(hub)
        writes = {
            k: (v - writes_before.get(k, 0)) / args.jobs
            for k, v in sorted(writes_after.items())
            if v > writes_before.get(k, 0)
        }
        decided = event_log_admitted(root / "fleet" / "fleet.db")
        admitted = dict(seen.admitted) if door == "hub" else decided
        created = {j: t for j in jobs if (t := seen.created_at(objects[j])) is not None}
        to_admitted = [admitted[j] - applied[j] for j in jobs if j in admitted]
        to_created = [created[j] - applied[j] for j in jobs if j in created]
        to_decided = [decided[j] - applied[j] for j in jobs if j in decided]

        # Correctness: one member object per job; on the hub, the finalizer and Admitted.
        count: dict[str, int] = {}
        for plane in planes[1:]:
            for item in plane.admin.items(PYTORCHJOBS):
                count[item["metadata"]["name"]] = count.get(item["metadata"]["name"], 0) + 1
        once = sum(1 for j in jobs if count.get(objects[j]) == 1)
        if door == "hub":
            listed = hub.admin.items(collection)
            marked = sum(
                1
                for o in listed
                if FINALIZER in (o["metadata"].get("finalizers") or [])
                and any(
                    c.get("type") == "Admitted"
                    for c in (o.get("status") or {}).get("conditions") or []
                )
            )
            detail = f"member objects once {once}/{args.jobs}, finalizer+Admitted {marked}"
            ok = once == args.jobs == len(count) and marked == args.jobs
        else:
            states = [
                j["state"]
                for j in fleet.request("GET", f"/api/v1/jobs?namespace={NAMESPACE}&limit=1000")[
                    "items"
                ]
            ]
            dispatched = states.count("Dispatched")
            detail = f"member objects once {once}/{args.jobs}, Dispatched in Fleet {dispatched}"
            ok = once == args.jobs == len(count) and dispatched == args.jobs
        resumed = sum(w.resumed for w in watches)
        if resumed:
            detail += f"; watches resumed {resumed} times"
        a50, a99 = quantiles(to_admitted)
        c50, c99 = quantiles(to_created)
        d50, d99 = quantiles(to_decided)
        return Figures(
            door=door,
            admitted_rate=len(admitted) / (max(admitted.values()) - first) if admitted else 0.0,
            created_rate=len(created) / (max(created.values()) - first) if created else 0.0,
            admitted_p50=a50,
            admitted_p99=a99,
            created_p50=c50,
            created_p99=c99,
            decided_p50=d50,
            decided_p99=d99,
            applied_rate=args.jobs / applying,
            cpu_fleet=cpu_fleet,
            cpu_planes=cpu_planes,
            cpu_hub=cpu_hub,
            writes=writes,
            cpu_bench=cpu_bench,
            wall=elapsed,
            ok=ok,
            detail=detail,
        )
    finally:
        for w in watches:
            w.stop.set()
        if fleet is not None:
            fleet.stop()
        for plane in planes:
            plane.stop()


def report(door: str, runs: list[Figures], jobs: int) -> None:
    def med(get: Callable[[Figures], float]) -> float:
        return statistics.median(get(f) for f in runs)

    what = (
        "hub (kube-apiserver, POST per job)"
        if door == "hub"
        else "HTTP, the baseline (POST /api/v1/submissions per job)"
    )
    print(f" door {what}, median of {len(runs)} run(s):")
    for f in runs:
        print(f"   run: {f.line()}")
    print(f"  jobs/s applied (the clients' answers)         {med(lambda f: f.applied_rate):8.1f}")
    print(f"  jobs/s, first apply -> last Admitted          {med(lambda f: f.admitted_rate):8.1f}")
    print(f"  jobs/s, first apply -> last member object     {med(lambda f: f.created_rate):8.1f}")
    print(f"  apply -> Admitted p50 / p99                   {med(lambda f: f.admitted_p50):8.2f} / "
          f"{med(lambda f: f.admitted_p99):.2f} s")  # fmt: skip
    print(f"  apply -> member object created p50 / p99      {med(lambda f: f.created_p50):8.2f} / "
          f"{med(lambda f: f.created_p99):.2f} s")  # fmt: skip
    print(f"  apply -> Fleet's Admitted entry p50 / p99     {med(lambda f: f.decided_p50):8.2f} / "
          f"{med(lambda f: f.decided_p99):.2f} s")  # fmt: skip
    cpu = med(lambda f: f.cpu_fleet)
    print(f"  CPU fleet serve                               {cpu:8.2f} s "
          f"({cpu / jobs * 1000:.1f} ms per job)")  # fmt: skip
    print(f"  CPU API servers + etcd (hub and members)      {med(lambda f: f.cpu_planes):8.2f} s "
          f"(the hub's {med(lambda f: f.cpu_hub):.2f} s)")  # fmt: skip
    shown = ", ".join(f"{k} {v:.2f}" for k, v in runs[len(runs) // 2].writes.items()) or "none"
    print(f"  hub writes per job (a middle run)             {shown}")
    print(f"  CPU this process (clients, watches)           {med(lambda f: f.cpu_bench):8.2f} s")
    print(f"  wall, first apply -> all done                 {med(lambda f: f.wall):8.2f} s")
    print(f"  correctness: {'OK' if all(f.ok for f in runs) else 'MISMATCH'} "
          f"({'; '.join(f.detail for f in runs)})")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16, help="applying threads")
    parser.add_argument("--nodes", type=int, default=NODES, help="Nodes of 8 GPUs per member")
    parser.add_argument("--runs", type=int, default=3, help="runs per door (medians printed)")
    parser.add_argument("--door", default="hub,http", help="hub, http or both (hub,http)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a run may take")
    parser.add_argument("--profile", type=Path, help="cProfile fleet serve into this file")
    parser.add_argument("--keep", type=Path, help="work (and leave the logs) in this directory")
    args = parser.parse_args()
    bin_dir = binaries(kubectl=True)
    if bin_dir is None:
        print("the binaries are not built: run scripts/kube-binaries", file=sys.stderr)
        return 1
    capacity = len(MEMBERS) * args.nodes * GPUS
    if args.jobs > capacity:
        print(f"--jobs: at most {capacity} (one 1-GPU pod each)", file=sys.stderr)
        return 1
    doors = [d.strip() for d in args.door.split(",") if d.strip()]
    if not doors or any(d not in ("hub", "http") for d in doors):
        print("--door: hub, http or hub,http", file=sys.stderr)
        return 1
    runs = 1 if args.profile else args.runs
    if args.profile:
        doors = doors[:1]
    results: dict[str, list[Figures]] = {d: [] for d in doors}
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        for i in range(runs):
            for door in doors:
                figures = run(door, args, bin_dir, root / f"{door}-{i}", args.profile)
                print(f"  ({i + 1}/{runs}) {figures.line()}", file=sys.stderr)
                results[door].append(figures)
    from fleet import compiled_core

    print(
        f"bench_hub: {args.jobs} PyTorchJobs of one 1-GPU pod, {args.clients} clients, "
        f"2 members x {args.nodes} Nodes x {GPUS} GPUs (no operator: jobs stay Dispatched), "
        f"fleet serve on SQLite, {compiled_core.describe()}"
    )
    for door in doors:
        report(door, results[door], args.jobs)
    print(f"  {TARGET}")
    return 0 if all(f.ok for rs in results.values() for f in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
