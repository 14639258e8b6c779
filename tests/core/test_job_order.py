"""Jobs compare in queue order, and equal as the dataclass says.

``Job`` writes ``__lt__`` (queue order, so that a queue's sorted lists bisect
without a key function) and therefore writes ``__eq__`` and ``__hash__`` too:
compiled, a class that writes one comparison answers all of them from it.
These tests hold them to :func:`~fleet.core.jobs.sort_key` and to the
dataclass's compared fields, whichever core runs.
"""

from __future__ import annotations

import dataclasses
import pickle

from fleet import compiled_core
from fleet.core.jobs import Job, ReplicaGroup, sort_key
from fleet.core.resources import Resources

BASE = Job(
    key="ns/a",
    queue="team-a",
    priority=10,
    seq=3,
    groups=(ReplicaGroup("Worker", 2, Resources({"nvidia.com/gpu": 4})),),
)

#: a different value for every field the dataclass compares
OTHER: dict[str, object] = {
    "key": "ns/b",
    "queue": "team-b",
    "priority": 11,
    "seq": 4,
    "groups": (ReplicaGroup("Worker", 3, Resources({"nvidia.com/gpu": 4})),),
    "min_members": 1,
    "gang": False,
    "preemptible": False,
    "gpu_sku": "A100",
    "clusters": frozenset({"c1"}),
    "priority_class": "prod",
    "pinned_cell_id": "cell-1",
    "target": 1,
    "queue_from_namespace": True,
    "gpu_skus": ("A100", "H100"),
    "gpu_terms": "GPU memory > 40960",
    "user": "alice",
    "active_deadline": 3600.0,
}


def test_every_compared_field_is_compared() -> None:
    compared = {f.name for f in dataclasses.fields(Job) if f.compare}
    assert compared == set(OTHER)
    for name, value in OTHER.items():
        changed = dataclasses.replace(BASE, **{name: value})
        assert changed != BASE, name
    same = dataclasses.replace(BASE)
    assert same is not BASE and same == BASE and hash(same) == hash(BASE)


def test_a_pickled_job_equals_and_hashes_as_the_original() -> None:
    compiled_core.picklable()
    again = pickle.loads(pickle.dumps(BASE))
    assert again == BASE and hash(again) == hash(BASE)
    assert {BASE: 1}[again] == 1


def test_jobs_sort_in_queue_order() -> None:
    jobs = [
        dataclasses.replace(BASE, key=f"ns/{p}-{s}", priority=p, seq=s)
        for p, s in [(10, 5), (100, 9), (10, 1), (-1, 0), (100, 2)]
    ]
    assert sorted(jobs) == sorted(jobs, key=sort_key)
    assert [sort_key(j) for j in sorted(jobs)] == [(-100, 2), (-100, 9), (-10, 1), (-10, 5), (1, 0)]
