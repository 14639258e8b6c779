"""Replica groups: a role split into two groups names its pods on from the first's.

A Volcano task whose ``minAvailable`` is below its replicas is two groups of
one role (:func:`fleet.manifests.convert.replica_groups`): the second starts at
``first``, so the role's pods are still ``role-0`` up, in placement order
minimums first.  A group that starts at 0 hashes as groups always did (the
memories of a cycle, and anything keyed by a job's shape, are unchanged), and
``first`` survives pickling and the database record, which writes it only
when it is not 0.
"""

from __future__ import annotations

import pickle

from fleet import compiled_core
from fleet.core import snapshot
from fleet.core.jobs import Job, ReplicaGroup
from fleet.core.resources import Resources

CPU = Resources({"cpu": 1000})


def split_job() -> Job:
    groups = (
        ReplicaGroup("master", 1, CPU),
        ReplicaGroup("work", 2, CPU),
        ReplicaGroup("master", 1, CPU, first=1),
        ReplicaGroup("work", 1, CPU, first=2),
    )
    return Job(key="ns/j", queue="q", priority=1, seq=1, groups=groups, min_members=3)


def test_a_split_role_names_its_pods_on_from_the_first_group() -> None:
    job = split_job()
    assert [(p.name, p.role, p.index) for p in job.pods] == [
        ("master-0", "master", 0),
        ("work-0", "work", 0),
        ("work-1", "work", 1),
        ("master-1", "master", 1),
        ("work-2", "work", 2),
    ]
    assert [p.name for p in job.pods[: job.gang_size]] == ["master-0", "work-0", "work-1"]


def test_a_group_starting_at_zero_hashes_as_before_and_first_tells_groups_apart() -> None:
    plain = ReplicaGroup("work", 2, CPU)
    assert plain == ReplicaGroup("work", 2, CPU, first=0)
    assert hash(plain) == hash("work") ^ (2 * 1_000_003) ^ hash(CPU)
    moved = ReplicaGroup("work", 2, CPU, first=1)
    assert moved != plain and hash(moved) != hash(plain)


def test_first_survives_pickling_and_the_record_which_writes_it_only_when_set() -> None:
    job = split_job()
    compiled_core.picklable()
    again = pickle.loads(pickle.dumps(job))
    assert again == job and [g.first for g in again.groups] == [0, 0, 1, 2]
    plain = snapshot.job_to_plain(job)
    assert [len(g) for g in plain["groups"]] == [3, 3, 4, 4]
    restored = snapshot.job_from_plain(plain)
    assert restored == job and [p.name for p in restored.pods] == [p.name for p in job.pods]
