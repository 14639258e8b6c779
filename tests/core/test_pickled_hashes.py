"""Values hashed in one process and unpickled in another hash as that process does.

Parsed jobs come back from the worker processes pickled (:mod:`fleet.api.parse_workers`),
and a string's hash differs from one interpreter to the next.  A resource
vector or replica group that kept the hash it cached where it was made would
miss its equals in every dict of the process that unpickles it (the cycle's
memories, a queue's groups of jobs): pickled, they carry their values only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MAKE = """
import pickle, sys
from fleet import compiled_core
from fleet.core.jobs import Job, ReplicaGroup
from fleet.core.resources import Resources
compiled_core.picklable()
per_pod = Resources({"nvidia.com/gpu": 8, "cpu": 4000})
limit = Resources.limits({"nvidia.com/gpu": 0, "cpu": 2000})
job = Job(key="ns/j", queue="a", priority=1, seq=1, groups=(ReplicaGroup("Worker", 2, per_pod),))
hash(per_pod), hash(limit), hash(job.groups), hash(job.gang_request)  # cached here
sys.stdout.buffer.write(pickle.dumps((per_pod, limit, job)))
"""

READ = """
import pickle, sys
from fleet import compiled_core
from fleet.core.jobs import Job, ReplicaGroup
from fleet.core.resources import Resources
compiled_core.picklable()
per_pod, limit, job = pickle.loads(sys.stdin.buffer.read())
same = Resources({"nvidia.com/gpu": 8, "cpu": 4000})
group = ReplicaGroup("Worker", 2, same)
print({per_pod: 1}.get(same), {job.groups[0]: 1}.get(group), {job.gang_request: 1}.get(
    Resources({"nvidia.com/gpu": 16, "cpu": 8000, "kube-queue/max-jobs": 1})),
    dict(limit.amounts))
"""


def _run(code: str, seed: str, data: bytes = b"") -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, input=data, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout


def test_vectors_and_groups_pickled_in_one_process_are_found_in_another() -> None:
    pickled = _run(MAKE, "1")
    out = _run(READ, "2", pickled).decode().strip()
    assert out == "1 1 1 {'nvidia.com/gpu': 0, 'cpu': 2000}"
