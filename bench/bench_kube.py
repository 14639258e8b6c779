"""Dispatch to a real member: from submission to every pod bound and the job Running.

Theory of operation: the benchmark starts one member control plane (etcd and
kube-apiserver from ``scripts/kube-binaries``) with the PyTorchJob CRD,
Fleet's RBAC and 16 Nodes of 8 GPUs, the tests' stand-in for the training
operator and kubelets (``tests/kube/operator.py``), and ``fleet serve`` on a
SQLite file with that member.  It submits N jobs of two 1-GPU workers each
(one HTTP request per job), waits until every job is Running, and reads each
job's events.

Printed figures:
* submissions per second;
* p50 and p99 of a job's time from Queued to Running (admission, creation of
  the PyTorchJob, the operator's pods, Fleet's bindings, the Running
  condition, the watch back to Fleet);
* the time until all N jobs run, from the first submission;
* whether each job has exactly one PyTorchJob in the member with two bound
  pods (``OK``) or not (``MISMATCH``).

The figures are printed, never asserted.

    .venv/bin/python bench/bench_kube.py [--jobs N]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.kube.conftest import Fleet, member_document, submission
from tests.kube.controlplane import ControlPlane, binaries
from tests.kube.operator import Operator

NODES = 16
GPUS = 8

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


def seconds(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    args = parser.parse_args()
    bin_dir = binaries()
    if bin_dir is None:
        print("kube-apiserver and etcd are not built: run scripts/kube-binaries", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plane = ControlPlane("bench", bin_dir, root)
        operator = None
        fleet = None
        try:
            plane.start()
            plane.install_crd()
            plane.install_rbac()
            plane.namespace("team-a")
            names = [f"bench-node-{i}" for i in range(NODES)]
            for name in names:
                plane.add_node(name, GPUS)
            operator = Operator(plane.admin, interval=0.05).start()
            doc = member_document("bench", plane.kubeconfig(), "bench")
            pool = doc["spec"]["cells"]["physicalCluster"]
            pool["cellTypes"]["GPU-NODE"]["childCellNumber"] = GPUS
            pool["cellTypes"]["GPU-POOL"]["childCellNumber"] = NODES
            pool["physicalCells"][0]["cellChildren"] = [{"cellAddress": n} for n in names]
            (root / "fleet").mkdir()
            fleet = Fleet(root / "fleet", [doc], quota=QUOTA).start()

            jobs = [f"job-{i}" for i in range(args.jobs)]
            started = time.monotonic()
            for job in jobs:
                fleet.submit(submission(job, workers=2, gpus=1))
            submitted = time.monotonic() - started
            waiting = set(jobs)
            while waiting:
                running = {
                    j["name"]
                    for j in fleet.request("GET", "/api/v1/jobs?state=Running&limit=1000")["items"]
                }
                waiting -= running
                time.sleep(0.1)
            all_running = time.monotonic() - started

            latencies = []
            for job in jobs:
                events = fleet.job(job)["events"]
                queued = seconds(next(e["time"] for e in events if e["reason"] == "Queued"))
                running_at = seconds(next(e["time"] for e in events if e["reason"] == "Running"))
                latencies.append(running_at - queued)
            objects = plane.admin.items("/apis/kubeflow.org/v1/pytorchjobs")
            pods = plane.admin.items("/api/v1/pods")
            bound = sum(1 for p in pods if p["spec"].get("nodeName"))
            ok = len(objects) == args.jobs and bound == 2 * args.jobs
            latencies.sort()
            p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
            print(
                f"bench_kube: {args.jobs} jobs x 2 pods on one real member ({NODES} x {GPUS} GPUs)"
            )
            print(f"  submissions/s              {args.jobs / submitted:8.1f}")
            print(f"  Queued -> Running p50      {statistics.median(latencies) * 1000:8.0f} ms")
            print(f"  Queued -> Running p99      {p99 * 1000:8.0f} ms")
            print(f"  all jobs Running after     {all_running:8.2f} s")
            print(f"  PyTorchJobs {len(objects)}, pods bound {bound}: {'OK' if ok else 'MISMATCH'}")
            return 0 if ok else 1
        finally:
            if fleet is not None:
                fleet.stop()
            if operator is not None:
                operator.stop()
            plane.stop()


if __name__ == "__main__":
    sys.exit(main())
