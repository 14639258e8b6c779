"""What passes between the loop and a member: keys, object names, dispatched jobs, errors."""

from __future__ import annotations

import hashlib
import re

import pytest

from fleet.clusters.base import (
    MEMBER_NAME_MAX_LENGTH,
    ClusterConflict,
    ClusterError,
    ClusterRejected,
    ClusterUnavailable,
    DispatchedJob,
    member_object_name,
    split_key,
)
from fleet.core.placement import PodPlacement
from tests.clusters.factories import dispatched

DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(
    ("key", "readable"),
    [
        ("team-a/train", "team-a-train"),
        ("0team/job", "j0team-job"),  # Kubeflow wants a letter first
        ("team/my.job.v2", "team-my-job-v2"),
        ("Team/Job_X", "team-job-x"),  # not valid names, still a valid label
        ("team/a..b", "team-a-b"),
        ("n/" + "x" * 200, "n-" + "x" * 40),
        ("n/" + "x" * 39 + "-y", "n-" + "x" * 39),  # cut before "-y", the "-" dropped
    ],
)
def test_member_object_names_are_readable_labels_with_a_hash_suffix(
    key: str, readable: str
) -> None:
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    name = member_object_name(key)
    assert name == f"{readable}-{digest}"
    assert DNS_1035_LABEL.match(name), name
    assert len(name) <= MEMBER_NAME_MAX_LENGTH


def test_member_object_names_tell_apart_keys_that_read_the_same() -> None:
    keys = ["a-b/c", "a/b-c", "a/b.c", "a/b--c", "n/" + "x" * 60, "n/" + "x" * 61]
    names = [member_object_name(k) for k in keys]
    assert len(set(names)) == len(keys), names
    assert names[0].startswith("a-b-c-") and names[1].startswith("a-b-c-")


@pytest.mark.parametrize("key", ["", "team", "/job", "team/", "a/b/c", "/"])
def test_a_key_is_namespace_slash_name(key: str) -> None:
    with pytest.raises(ValueError, match="a job key is namespace/name"):
        split_key(key)
    with pytest.raises(ValueError, match="a job key is namespace/name"):
        member_object_name(key)


def test_a_dispatched_job_knows_its_names_and_annotations() -> None:
    job = dispatched("team-a/train", duration="90s")
    assert (job.namespace, job.name) == ("team-a", "train")
    assert job.object_name == member_object_name("team-a/train")
    assert job.annotations == {"fleet.io/simulated-duration": "90s"}
    # The manifest is left out of the hash, so a dispatched job can be a key.
    assert hash(job) == hash(dispatched("team-a/train", duration="5m"))
    assert job != dispatched("team-a/train", duration="5m")
    assert {job: 1}[dispatched("team-a/train", duration="90s")] == 1


@pytest.mark.parametrize(
    "manifest",
    [{}, {"metadata": None}, {"metadata": {"annotations": ["x"]}}, {"metadata": {}}],
    ids=["no-metadata", "null-metadata", "annotations-a-list", "no-annotations"],
)
def test_a_manifest_without_annotations_has_none(manifest: dict[str, object]) -> None:
    job = DispatchedJob("t/j", "u", "c", "q", (PodPlacement("p", "n"),), manifest)
    assert job.annotations == {}


PODS = (PodPlacement("p0", "n1", (0,)), PodPlacement("p1", "n1", (1,)))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"key": "nokey"}, "a job key is namespace/name"),
        ({"uid": ""}, "the uid is empty"),
        ({"cluster": ""}, "the cluster is empty"),
        ({"pods": ()}, "no pod is placed"),
        ({"pods": (*PODS, PodPlacement("p0", "n2"))}, "pods placed twice: p0"),
        ({"manifest": ["not", "a", "mapping"]}, "the manifest is not a mapping"),
    ],
)
def test_a_dispatched_job_is_checked_when_made(fields: dict[str, object], message: str) -> None:
    values: dict[str, object] = {
        "key": "t/j",
        "uid": "u",
        "cluster": "c",
        "queue": "q",
        "pods": PODS,
        "manifest": {},
    }
    values.update(fields)
    with pytest.raises(ValueError, match=message):
        DispatchedJob(**values)  # type: ignore[arg-type]


def test_cluster_errors_are_one_family_naming_the_cluster() -> None:
    for cls in (ClusterConflict, ClusterUnavailable, ClusterRejected):
        error = cls("sim-a", "it went wrong")
        assert isinstance(error, ClusterError)
        assert str(error) == "sim-a: it went wrong"
        assert (error.cluster, error.message) == ("sim-a", "it went wrong")
