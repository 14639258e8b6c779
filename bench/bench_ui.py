"""The dashboard at scale: page times and sizes with 1,000 queues and 10,000 jobs.

Theory of operation: starts ``fleet serve`` as a separate process on a SQLite
file with a quota tree of ``--queues`` leaves (each may use 8 GPUs) and one
simulated member cluster of 8-GPU nodes, submits ``--jobs`` one-node jobs
spread over the queues (100 per request), waits until the scheduler has
seen them all, then fetches each dashboard page ``--rounds`` times in turn
and prints, per page, the median and the slowest time and the size of the
HTML.  Every page is server-side paged, so its size stays bounded however
many jobs there are.  The figures are printed, never asserted.

    .venv/bin/python bench/bench_ui.py [--queues 1000] [--jobs 10000] [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from fleet.testing import servers
from fleet.testing.documents import pytorchjob

PER_REQUEST = 100
NODES = 64


def _tree(queues: int) -> dict[str, Any]:
    children = [
        {"name": f"q{i:04d}", "max": {"nvidia.com/gpu": 8}, "namespaces": [f"ns{i:04d}"]}
        for i in range(queues)
    ]
    gpus = NODES * 8
    root = {"name": "root", "min": {"nvidia.com/gpu": gpus}, "max": {"nvidia.com/gpu": gpus}}
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "bench"},
        "spec": {"root": {**root, "children": children}},
    }


def _cluster() -> dict[str, Any]:
    nodes = [{"cellAddress": f"big-node-{i:03d}"} for i in range(NODES)]
    return {
        "apiVersion": "fleet.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": "big"},
        "spec": {
            "simulated": True,
            "cells": {
                "physicalCluster": {
                    "cellTypes": {
                        "NODE": {"childCellType": "GPU", "childCellNumber": 8, "isNodeLevel": True},
                        "POOL": {"childCellType": "NODE", "childCellNumber": NODES},
                    },
                    "physicalCells": [{"cellType": "POOL", "cellChildren": nodes}],
                }
            },
        },
    }


def _job(i: int, queues: int) -> str:
    """Job ``i``: one 8-GPU worker for an hour, in queue ``i`` modulo ``queues``."""
    return pytorchjob(f"job-{i:05d}", namespace=f"ns{i % queues:04d}", gpus=8, duration="1h")


def _get(url: str) -> tuple[float, int]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as resp:
        body = resp.read()
        assert resp.status == 200
    return time.perf_counter() - start, len(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-bench-ui-") as tmp:
        work = Path(tmp)
        (work / "tree.yaml").write_text(yaml.safe_dump(_tree(args.queues)))
        (work / "clusters.yaml").write_text(yaml.safe_dump(_cluster()))
        files = ["--quota", str(work / "tree.yaml"), "--clusters", str(work / "clusters.yaml")]
        with servers.serving(work, extra=files, schedule_interval=1) as server:
            base = server.url
            started = time.perf_counter()
            for first in range(0, args.jobs, PER_REQUEST):
                last = min(args.jobs, first + PER_REQUEST)
                text = "---\n".join(_job(i, args.queues) for i in range(first, last))
                request = urllib.request.Request(
                    base + "/api/v1/submissions",
                    data=text.encode(),
                    headers={"Content-Type": "application/yaml"},
                    method="POST",
                )
                with urllib.request.urlopen(request, timeout=300) as resp:
                    assert resp.status in (200, 201)
            print(
                f"submitted {args.jobs} jobs to {args.queues} queues "
                f"in {time.perf_counter() - started:.1f} s"
            )
            time.sleep(5)  # a few scheduling iterations
            pages = [
                "/ui/",
                "/ui/?page=5",
                "/ui/?q=q0999",
                "/ui/queues/q0007",
                "/ui/queues/root",
                "/ui/jobs",
                "/ui/jobs?queue=q0007&state=Queued",
                "/ui/clusters",
                "/ui/clusters/big",
                "/ui/jobs/ns0007/job-00007",
            ]
            print(f"{'page':40} {'median ms':>10} {'max ms':>8} {'KiB':>7}")
            for page in pages:
                times, size = [], 0
                for _ in range(args.rounds):
                    seconds, size = _get(base + page)
                    times.append(seconds * 1000)
                print(
                    f"{page:40} {statistics.median(times):10.1f} {max(times):8.1f} "
                    f"{size / 1024:7.1f}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
