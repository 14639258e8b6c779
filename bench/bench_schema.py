"""What strict CRD-schema validation costs (fleet.manifests.kinds.schema): first use, per document.

Theory of operation: two measurements, each the median of ``--runs``
repetitions, in wall time and CPU time (``time.process_time``).

* First use, per kind: a fresh interpreter (``python -c``) imports
  :mod:`fleet.manifests.kinds.schema`, checks that no schema is loaded yet (loading is
  lazy), and validates one small document of that kind; it reports the
  import, jsonschema's import (deferred to the first validation) and the
  first validation (loading the kind's JSON, transforming it, building its
  validator and validating) separately.
* Per document: a typical two-role PyTorchJob (Master 1 + Worker 2, each one
  container with requests and limits, an env list and a port) is validated
  ``--docs`` times in a loop, valid (the ``is_valid`` fast path) and with
  three typos (``iter_errors`` walk and the messages).  For comparison it
  prints what the same validation costs when every document takes the slow
  path (``iter_errors`` and no fast path), and two baselines: what reading
  the document's YAML costs (the C loader) and what the validation costs
  with jsonschema's own descent (a validator built for every schema node
  entered, every time: what ``fleet.manifests.kinds.schema._descend`` replaces).
  Target: <= 200 us per valid document.

The figures are printed, never asserted.

    .venv/bin/python bench/bench_schema.py [--runs N] [--docs N]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from fleet.manifests.kinds import schema

ROOT = Path(__file__).resolve().parents[1]
LOADER = yaml.CSafeLoader
TARGET = "target: <= 200 us per valid document"

#: One small valid document per kind (apiVersion, kind and a spec its schema accepts).
_POD = {"spec": {"containers": [{"name": "main", "image": "example/train:1"}]}}
_JOB_TEMPLATE = {"spec": {"template": _POD}}
SMALL: dict[tuple[str, str], dict[str, Any]] = {
    ("kubeflow.org/v1", "PyTorchJob"): {
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": _POD}}}
    },
    ("kubeflow.org/v1", "TFJob"): {
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": _POD}}}
    },
    ("kubeflow.org/v1", "MPIJob"): {
        "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1, "template": _POD}}}
    },
    ("kubeflow.org/v2beta1", "MPIJob"): {
        "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1, "template": _POD}}}
    },
    ("batch.volcano.sh/v1alpha1", "Job"): {
        "spec": {"tasks": [{"name": "worker", "replicas": 1, "template": _POD}]}
    },
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): {
        "spec": {"replicatedJobs": [{"name": "workers", "template": _JOB_TEMPLATE}]}
    },
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): {
        "spec": {"runtimeRef": {"name": "torch-distributed"}}
    },
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): {
        "spec": {
            "template": {"spec": {"replicatedJobs": [{"name": "node", "template": _JOB_TEMPLATE}]}}
        }
    },
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): {
        "spec": {
            "template": {"spec": {"replicatedJobs": [{"name": "node", "template": _JOB_TEMPLATE}]}}
        }
    },
    ("batch/v1", "Job"): {"spec": {"template": _POD}},
}

TWO_ROLES = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: train
  namespace: team-a
  annotations: {fleet.io/expected-duration: 2h}
spec:
  runPolicy:
    cleanPodPolicy: None
    schedulingPolicy: {queue: team-a, priorityClass: prod}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        metadata: {labels: {app: train, role: master}}
        spec:
          containers:
          - name: pytorch
            image: example/train:1
            command: [python3, /opt/train.py, --epochs=10]
            env:
            - {name: NCCL_DEBUG, value: INFO}
            ports:
            - {containerPort: 23456, name: pytorchjob-port}
            resources:
              requests: {cpu: "8", memory: 64Gi, nvidia.com/gpu: 8}
              limits: {cpu: "8", memory: 64Gi, nvidia.com/gpu: 8}
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        metadata: {labels: {app: train, role: worker}}
        spec:
          containers:
          - name: pytorch
            image: example/train:1
            command: [python3, /opt/train.py, --epochs=10]
            env:
            - {name: NCCL_DEBUG, value: INFO}
            ports:
            - {containerPort: 23456, name: pytorchjob-port}
            resources:
              requests: {cpu: "8", memory: 64Gi, nvidia.com/gpu: 8}
              limits: {cpu: "8", memory: 64Gi, nvidia.com/gpu: 8}
"""

_FIRST_USE = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from fleet.manifests.kinds import schema
t1, c1 = time.perf_counter(), time.process_time()
assert schema.validator.cache_info().currsize == 0, "a schema was loaded on import"
api, kind, doc = json.loads(sys.argv[1])
schema.validator_class()
t2, c2 = time.perf_counter(), time.process_time()
found = schema.problems(api, kind, doc)
t3, c3 = time.perf_counter(), time.process_time()
assert not found, found
print(json.dumps([t1 - t0, c1 - c0, t2 - t1, c2 - c1, t3 - t2, c3 - c2]))
"""


def first_use(api: str, kind: str, doc: dict[str, Any], runs: int) -> list[list[float]]:
    """[wall, CPU] of the import, of jsonschema's import and of the first validation, in
    each of ``runs`` interpreters."""
    out = []
    for _ in range(runs):
        arg = json.dumps([api, kind, {"apiVersion": api, "kind": kind, **doc}])
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_USE, arg],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        out.append(json.loads(done.stdout))
    return out


def per_call(fn: Callable[[], object], docs: int, runs: int) -> tuple[float, float]:
    """Median over ``runs`` of (wall, cpu) seconds per call of ``fn``, called ``docs`` times."""
    walls, cpus = [], []
    fn()
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(docs):
            fn()
        walls.append((time.perf_counter() - t0) / docs)
        cpus.append((time.process_time() - c0) / docs)
    return statistics.median(walls), statistics.median(cpus)


def with_typos(doc: dict[str, Any]) -> dict[str, Any]:
    bad = copy.deepcopy(doc)
    worker = bad["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["replcas"] = worker.pop("replicas")
    container = worker["template"]["spec"]["containers"][0]
    container["resource"] = container.pop("resources")
    bad["spec"]["runPolicy"]["schedulingPolicy"]["priorityClas"] = "prod"
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="repetitions (the median is printed)")
    parser.add_argument("--docs", type=int, default=2000, help="documents per timed loop")
    args = parser.parse_args()

    print(f"first use per kind (fresh interpreter, median of {args.runs}), wall / CPU ms:")
    for (api, kind), doc in SMALL.items():
        runs = first_use(api, kind, doc, args.runs)
        ms = [statistics.median(r[i] for r in runs) * 1e3 for i in range(6)]
        crds = ROOT / "fleet" / "manifests" / "kinds" / "crds"
        size = (crds / schema.SCHEMAS[(api, kind)]).stat().st_size
        print(
            f"  {api + ' ' + kind:<54} import {ms[0]:5.1f} / {ms[1]:5.1f}   "
            f"jsonschema {ms[2]:5.1f} / {ms[3]:5.1f}   "
            f"load + first validation {ms[4]:5.1f} / {ms[5]:5.1f}   ({size / 1024:.0f} KiB)"
        )

    doc = yaml.load(TWO_ROLES, Loader=yaml.CSafeLoader)
    api, kind = doc["apiVersion"], doc["kind"]
    assert schema.problems(api, kind, doc) == []
    bad = with_typos(doc)
    assert len(schema.problems(api, kind, bad)) == 3
    checker = schema.validator(api, kind)
    body = {k: v for k, v in doc.items() if k not in schema.SKIPPED}

    print(
        f"\nper document, two-role PyTorchJob (median of {args.runs} x {args.docs}), wall / CPU us:"
    )
    rows: list[tuple[str, Callable[[], object]]] = [
        ("valid (is_valid fast path)", lambda: schema.problems(api, kind, doc)),
        ("three typos (walk + messages)", lambda: schema.problems(api, kind, bad)),
        ("valid, slow path only (iter_errors)", lambda: list(checker.iter_errors(body))),
        (
            "baseline: reading its YAML (CSafeLoader)",
            lambda: yaml.load(TWO_ROLES, LOADER),
        ),
    ]
    for label, fn in rows:
        wall, cpu = per_call(fn, args.docs, args.runs)
        print(f"  {label:<42} {wall * 1e6:7.1f} / {cpu * 1e6:7.1f}")
    fast = schema._descend
    schema._descend = _jsonschema_descend  # type: ignore[assignment]
    try:
        wall, cpu = per_call(lambda: schema.problems(api, kind, doc), args.docs, args.runs)
    finally:
        schema._descend = fast
    label = "baseline: valid, jsonschema's own descent"
    print(f"  {label:<42} {wall * 1e6:7.1f} / {cpu * 1e6:7.1f}")
    print(TARGET)


def _jsonschema_descend(validator: Any, instance: Any, node: Any, path: str | int) -> Any:
    """jsonschema's own descent (a validator built per node, every time, no leaf tests):
    what :func:`fleet.manifests.kinds.schema._descend` replaces."""
    return validator.descend(instance, node, path=path)


if __name__ == "__main__":
    main()
