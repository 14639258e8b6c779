"""The hub's objects as plain JSON: what Fleet reads from them and writes on them."""

from __future__ import annotations

from fleet.hub import objects
from fleet.hub.objects import JobFacts


def test_the_binding_event_reads_as_the_walkthroughs() -> None:
    message = objects.binding_message("cf1a2b3c", ["Master-0", "Worker-0", "Worker-1"])
    assert message == (
        "Binding has been scheduled successfully. Result: {cf1a2b3c:0,[{master 1} {worker 2}]}"
    )


def test_queue_names_follow_the_path_with_a_stable_suffix() -> None:
    name = objects.queue_name(["root", "child-2"])
    assert name.startswith("root-child-2-") and len(name) == len("root-child-2-") + 5
    assert objects.queue_name(["root", "child-2"]) == name  # a restarted Fleet finds it
    assert objects.queue_name(["root"]) != objects.queue_name(["root", "child-2"])
    assert len(objects.queue_name(["root", "x" * 100])) <= 63


def test_a_hub_job_becomes_a_document_with_its_uid_and_without_bookkeeping() -> None:
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "a",
            "namespace": "team-a",
            "uid": "u-1",
            "resourceVersion": "7",
            "generation": 2,
            "finalizers": [objects.FINALIZER],
            "labels": {"app": "x"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "note": "kept",
            },
            "managedFields": [{}],
        },
        "spec": {"pytorchReplicaSpecs": {}},
        "status": {"conditions": []},
    }
    doc = objects.job_document(obj)
    assert doc == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "a",
            "namespace": "team-a",
            "labels": {"app": "x"},
            "annotations": {"note": "kept", objects.HUB_UID: "u-1"},
        },
        "spec": {"pytorchReplicaSpecs": {}},
    }
    assert objects.hub_uid(doc) == "u-1"


def test_the_finalizer_patch_is_refused_when_the_finalizers_changed_meanwhile() -> None:
    bare = {"metadata": {"name": "a"}}
    assert objects.finalizer_patch(bare, True) == [
        {"op": "add", "path": "/metadata/finalizers", "value": [objects.FINALIZER]}
    ]
    held = {"metadata": {"finalizers": ["other", objects.FINALIZER]}}
    assert objects.finalizer_patch(held, False) == [
        {"op": "test", "path": "/metadata/finalizers", "value": ["other", objects.FINALIZER]},
        {"op": "replace", "path": "/metadata/finalizers", "value": ["other"]},
    ]


def test_conditions_grow_with_the_state_and_the_newest_is_last() -> None:
    queued = objects.job_status(JobFacts("Queued", "team-a", None, "waits for 8 GPUs", {}))
    assert [c["type"] for c in queued["conditions"]] == ["Queued"]
    assert queued["conditions"][0]["message"] == "queued in team-a: waits for 8 GPUs"
    running = objects.job_status(JobFacts("Running", "team-a", "m1", "", {"Running": 0.0}))
    assert [c["type"] for c in running["conditions"]] == [
        "Queued",
        "Admitted",
        "Dispatched",
        "Running",
    ]
    assert running["conditions"][-1]["lastTransitionTime"] == "1970-01-01T00:00:00Z"
    assert running["conditions"][1]["message"] == "admitted to member m1"


def test_the_members_status_is_shown_under_fleets_conditions() -> None:
    member = {
        "conditions": [
            {"type": "Created", "status": "True"},
            {"type": "Running", "status": "True", "reason": "PyTorchJobRunning"},
        ],
        "replicaStatuses": {"Worker": {"active": 2}},
    }
    status = objects.job_status(JobFacts("Running", "team-a", "m1", "", {}, member))
    assert status["replicaStatuses"] == {"Worker": {"active": 2}}
    types = [c["type"] for c in status["conditions"]]
    assert types == ["Queued", "Admitted", "Dispatched", "Created", "Running"]
    assert status["conditions"][-1]["reason"] == "PyTorchJobRunning"  # the member's
