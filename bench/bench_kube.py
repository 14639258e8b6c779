"""Dispatch to two real members running the real training operator and KWOK.

Theory of operation: the benchmark starts two member control planes (etcd
and kube-apiserver from ``scripts/kube-binaries``), each with the CRDs
the training operator serves, Fleet's RBAC and 8 Nodes of 8 GPUs, and in each the controllers of
``tests/kube/real_operator.py`` (from ``scripts/controller-binaries``, started by
``tests/kube/controllers.py``): the
Kubeflow training operator v1.8.1, KWOK playing the Nodes' kubelets, and the
garbage collector; then ``fleet serve`` on a SQLite file with both members.
It watches each member's PyTorchJobs and pods (the time each PyTorchJob is
first seen, and each pod first seen Running), submits N jobs of two 1-GPU
workers each (one HTTP request per job, from ``--clients`` threads at once),
and waits until every job's pods run.

Printed figures (medians of nothing: one run; run it several times):
* jobs/s dispatched: N over the time from the first submission to the last
  member object created;
* Fleet's own part, per job: its submission accepted (the HTTP answer) to its
  member object created (seen by the watch), p50 and p99;
* the operator's part, per job: its object created to all its pods Running
  (the operator's pods, Fleet's bindings, KWOK), p50 and p99;
* CPU seconds of ``fleet serve`` and of everything (the API servers, etcd,
  the controllers, this process) beside the wall time;
* whether each job has exactly one PyTorchJob with two pods Running (``OK``);
* the baseline line: the figures of the stand-in operator this benchmark
  used before (27.8 jobs/s; Queued -> Running p50 2.1 s).

The figures are printed, never asserted.

    .venv/bin/python bench/bench_kube.py [--jobs N] [--clients C] [--operator-threads T]
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleet.testing.servers import cpu_seconds
from tests.kube.conftest import CRDS, Fleet, member_document, submission
from tests.kube.controllers import controller_binaries
from tests.kube.controlplane import ControlPlane, binaries
from tests.kube.real_operator import JOB_NAME_LABEL, MemberControllers, kwok_node

MEMBERS = ("alpha", "beta")
NODES = 8
GPUS = 8
BASELINE = "stand-in operator, one member: 27.8 jobs/s; Queued -> Running p50 2.1 s"

QUOTA = """\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: bench}
spec:
  root:
    name: root
    children:
      - name: team-a
        namespaces: [team-a]
"""


class Seen:
    """When each PyTorchJob and each Running pod was first seen in a member (a watch)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.created: dict[str, float] = {}  # object name -> time
        self.running: dict[str, dict[str, float]] = {}  # object name -> pod -> time
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._watch, args=(path, fn), daemon=True)
            for path, fn in (
                ("/apis/kubeflow.org/v1/pytorchjobs", self._job),
                (f"/api/v1/pods?labelSelector={JOB_NAME_LABEL}", self._pod),
            )
        ]

    def start(self) -> Seen:
        for thread in self.threads:
            thread.start()
        return self

    def _watch(self, path: str, fn: Any) -> None:
        admin = self.plane.admin
        context = ssl.create_default_context(cafile=str(admin.ca_file))
        sep = "&" if "?" in path else "?"
        req = urllib.request.Request(f"{admin.url}{path}{sep}watch=true&timeoutSeconds=3600")
        req.add_header("Authorization", f"Bearer {admin.token}")
        with urllib.request.urlopen(req, context=context) as resp:
            for line in resp:
                if self.stop.is_set():
                    return
                event = json.loads(line)
                with self.lock:
                    fn(event["type"], event["object"], time.time())

    def _job(self, kind: str, obj: dict[str, Any], now: float) -> None:
        self.created.setdefault(obj["metadata"]["name"], now)

    def _pod(self, kind: str, obj: dict[str, Any], now: float) -> None:
        if (obj.get("status") or {}).get("phase") != "Running":
            return
        job = obj["metadata"]["labels"][JOB_NAME_LABEL]
        self.running.setdefault(job, {}).setdefault(obj["metadata"]["name"], now)

    def all_running(self, job: str, pods: int) -> float | None:
        with self.lock:
            times = self.running.get(job, {})
            return max(times.values()) if len(times) == pods else None


def quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--clients", type=int, default=8, help="submitting threads")
    parser.add_argument("--nodes", type=int, default=NODES, help="fake Nodes per member")
    parser.add_argument(
        "--per-submission", type=int, default=1, help="jobs in one submission (one request)"
    )
    parser.add_argument("--operator-threads", type=int, default=1, help="-controller-threads")
    parser.add_argument("--keep", type=Path, help="work (and leave the logs) in this directory")
    args = parser.parse_args()
    bin_dir, controllers_dir = binaries(), controller_binaries()
    if bin_dir is None or controllers_dir is None:
        print(
            "the binaries are not built: run scripts/kube-binaries and scripts/controller-binaries",
            file=sys.stderr,
        )
        return 1
    capacity = len(MEMBERS) * args.nodes * GPUS // 2
    if args.jobs > capacity:
        print(f"--jobs: at most {capacity} (two 1-GPU pods each)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        planes: dict[str, ControlPlane] = {}
        controllers: list[MemberControllers] = []
        seen: dict[str, Seen] = {}
        fleet = None
        try:
            documents = []
            for member in MEMBERS:
                plane = planes[member] = ControlPlane(member, bin_dir, root)
                plane.start()
                plane.install_crd(*CRDS)
                plane.install_rbac()
                plane.namespace("team-a")
                names = [f"{member}-node-{i}" for i in range(args.nodes)]
                for name in names:
                    plane.add_node(name, GPUS)
                    kwok_node(plane, name)
                member_controllers = MemberControllers(
                    plane, controllers_dir, plane.dir / "controllers",
                    threads=args.operator_threads,
                )  # fmt: skip
                controllers.append(member_controllers)  # stopped below, even if it fails
                member_controllers.start()
                seen[member] = Seen(plane).start()
                doc = member_document(member, plane.kubeconfig(), member)
                pool = doc["spec"]["cells"]["physicalCluster"]
                pool["cellTypes"]["GPU-NODE"]["childCellNumber"] = GPUS
                pool["cellTypes"]["GPU-POOL"]["childCellNumber"] = args.nodes
                pool["physicalCells"][0]["cellChildren"] = [{"cellAddress": n} for n in names]
                documents.append(doc)
            (root / "fleet").mkdir()
            fleet = Fleet(root / "fleet", documents, quota=QUOTA).start()
            assert fleet.proc is not None
            time.sleep(1.0)  # the members' first lists
            pids = [fleet.proc.pid]
            for plane in planes.values():
                pids += [p.pid for p in (plane.apiserver, plane.etcd) if p is not None]
            for c in controllers:
                pids += c.procs.pids()
            cpu_before = {pid: cpu_seconds(pid) for pid in pids}
            own_before = sum(os.times()[:2])

            jobs = [f"job-{i}" for i in range(args.jobs)]
            accepted: dict[str, float] = {}
            texts = {job: submission(job, workers=2, gpus=1) for job in jobs}

            size = max(1, args.per_submission)
            batches = [jobs[i : i + size] for i in range(0, len(jobs), size)]

            def submit(batch: list[str]) -> None:
                fleet.submit("\n---\n".join(texts[job] for job in batch))  # type: ignore[union-attr]
                now = time.time()
                for job in batch:
                    accepted[job] = now

            first = time.time()
            wall = time.monotonic()
            with ThreadPoolExecutor(args.clients) as pool_:
                list(pool_.map(submit, batches))
            submitted = time.monotonic() - wall

            def object_name(job: str) -> str:
                from fleet.clusters.base import member_object_name

                return member_object_name(f"team-a/{job}")

            def where(job: str) -> tuple[Seen, float] | None:
                for s in seen.values():
                    created = s.created.get(object_name(job))
                    if created is not None:
                        return s, created
                return None

            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                found = {job: where(job) for job in jobs}
                if all(
                    f is not None and f[0].all_running(object_name(j), 2) is not None
                    for j, f in found.items()
                ):
                    break
                time.sleep(0.05)
            all_running = time.monotonic() - wall
            cpu_fleet = cpu_seconds(pids[0]) - cpu_before[pids[0]]
            cpu_all = sum(cpu_seconds(pid) - before for pid, before in cpu_before.items())
            cpu_all += sum(os.times()[:2]) - own_before

            fleet_part, operator_part, created_at = [], [], []
            for job in jobs:
                found = where(job)
                if found is None:
                    continue
                s, created = found
                created_at.append(created)
                fleet_part.append(created - accepted[job])
                running = s.all_running(object_name(job), 2)
                if running is not None:
                    operator_part.append(running - created)
            objects = sum(
                len(p.admin.items("/apis/kubeflow.org/v1/pytorchjobs")) for p in planes.values()
            )
            spread = {m: len(s.created) for m, s in seen.items()}
            ok = objects == args.jobs and len(operator_part) == args.jobs
            dispatch_rate = len(created_at) / (max(created_at) - first) if created_at else 0.0
            f50, f99 = quantiles(fleet_part) if fleet_part else (0.0, 0.0)
            o50, o99 = quantiles(operator_part) if operator_part else (0.0, 0.0)
            print(
                f"bench_kube: {args.jobs} PyTorchJobs x 2 pods to two real members "
                f"({args.nodes} x {GPUS} GPUs each), training operator v1.8.1 "
                f"(-controller-threads={args.operator_threads}) + KWOK, "
                f"{args.clients} submitting clients, {args.per_submission} jobs per submission"
            )
            print(f"  submissions/s                          {args.jobs / submitted:8.1f}")
            print(f"  jobs/s dispatched (to {spread})  {dispatch_rate:8.1f}")
            print(f"  Fleet: accepted -> object created p50  {f50 * 1000:8.0f} ms")
            print(f"  Fleet: accepted -> object created p99  {f99 * 1000:8.0f} ms")
            print(f"  operator: created -> pods Running p50  {o50 * 1000:8.0f} ms")
            print(f"  operator: created -> pods Running p99  {o99 * 1000:8.0f} ms")
            print(f"  all jobs' pods Running after           {all_running:8.2f} s wall")
            print(f"  CPU: fleet serve {cpu_fleet:.2f} s, everything {cpu_all:.2f} s")
            print(f"  baseline ({BASELINE})")
            print(f"  PyTorchJobs {objects}, jobs all Running {len(operator_part)}: "
                  f"{'OK' if ok else 'MISMATCH'}")  # fmt: skip
            return 0 if ok else 1
        finally:
            for s in seen.values():
                s.stop.set()
            if fleet is not None:
                fleet.stop()
            for c in controllers:
                c.stop()
            for plane in planes.values():
                plane.stop()


if __name__ == "__main__":
    sys.exit(main())
