"""``fleet describe job`` as a person reads it: requests in GPUs, CPUs and GiB,
durations and ages instead of timestamps, the waiting reason, and an estimated
start that is never a time in the past (:mod:`fleet.cli.describe_job`)."""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest

from fleet.cli.describe_job import ago, amounts, estimate, render

NOW = datetime.datetime(2026, 11, 28, 13, 55, tzinfo=datetime.UTC).timestamp()
REASON = "quota group root is full: 45 of 48 GPUs used; this job needs 24"
PER_POD = {"nvidia.com/gpu": "8", "cpu": "32", "memory": "128Gi"}


def job(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "train",
        "namespace": "team-a",
        "kind": "PyTorchJob",
        "apiVersion": "kubeflow.org/v1",
        "uid": "u1",
        "queue": "team-a",
        "state": "Queued",
        "priorityClass": "high",
        "priority": 100,
        "preemptible": True,
        "gangMinimum": 3,
        "request": {"nvidia.com/gpu": "24", "cpu": "96", "memory": "384Gi"},
        "podSets": [
            {"role": "Master", "count": 1, "perPod": PER_POD, "placed": 0, "total": PER_POD},
            {
                "role": "Worker",
                "count": 2,
                "perPod": PER_POD,
                "placed": 0,
                "total": {"nvidia.com/gpu": "16", "cpu": "64", "memory": "256Gi"},
            },
        ],
        "placement": [],
        "submittedAt": "2026-11-28T12:50:00.123456Z",
        "firstStartedAt": "2026-11-28T12:00:00Z",
        "lastStartedAt": "2026-11-28T13:00:00Z",
        "runTimeSeconds": 3900.7,
        "reason": REASON,
        "estimatedStart": {
            "time": "2026-11-28T14:10:00Z",
            "earliest": "2026-11-28T14:05:00Z",
            "latest": "2026-11-28T14:20:00Z",
            "overdue": False,
            "declared": True,
            "assumes": "its run time: 1h (declared)",
            "computedAt": "2026-11-28T13:54:30Z",
        },
        "preemptions": [
            {
                "time": "2026-11-28T13:30:00.5Z",
                "preemptor": "team-b/x",
                "reason": "Reclaim",
                "quotaPath": ["team-a", "root", "team-b"],
                "message": "reclaimed for team-b/x of queue team-b",
            }
        ],
        "events": [
            {
                "time": "2026-11-28T12:50:00.123456Z",
                "type": "Normal",
                "reason": "Queued",
                "message": "queued in team-a",
            },
            {
                "time": "2026-11-28T13:30:00.5Z",
                "type": "Warning",
                "reason": "Preempted",
                "message": "reclaimed for team-b/x of queue team-b",
            },
        ],
    }
    return {**base, **changes}


def field(text: str, label: str) -> str:
    for line in text.splitlines():
        if line.startswith(label + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {label} in\n{text}")


def test_a_waiting_job_reads_in_words_durations_and_ages() -> None:
    out = render(job(), NOW)
    assert field(out, "Requests") == "24 GPUs, 96 CPUs, 384 GiB memory in all"
    assert field(out, "Gang minimum") == "3 pods must start together"
    assert field(out, "Submitted") == "1h4m ago"
    assert field(out, "Started") == "55m ago (first start 1h55m ago)"
    assert field(out, "Run time") == "1h5m"
    assert field(out, "Waiting reason") == REASON
    assert field(out, "Estimated start") == (
        "in 10-25m (between 14:05 and 14:20 UTC; assumes the jobs' declared run times; "
        "its run time: 1h (declared); computed 30s ago)"
    )
    sets = out.split("Pod sets:\n", 1)[1].splitlines()
    assert re.split(r"\s{3,}", sets[2].strip()) == [
        "Worker",
        "2",
        "-",
        "0",
        "8 GPUs, 32 CPUs, 128 GiB memory",
        "16 GPUs, 64 CPUs, 256 GiB memory",
    ]
    preempted = out.split("Preemptions:\n", 1)[1].splitlines()
    assert preempted[1].split() == [
        "24m",
        "ago",
        "Reclaim",
        "team-b/x",
        "team-a",
        ">",
        "root",
        ">",
        "team-b",
    ]
    events = out.split("Events:\n", 1)[1].splitlines()
    assert events[0].split() == ["AGE", "TYPE", "REASON", "MESSAGE"]
    assert events[1].split()[:4] == ["1h4m", "ago", "Normal", "Queued"]
    assert events[2].split()[:4] == ["24m", "ago", "Warning", "Preempted"]
    # No absolute time, and no microseconds, anywhere.
    assert not re.search(r"\d{4}-\d{2}-\d{2}T|\.\d{3}", out), out


def test_a_running_job_says_for_how_long_and_where() -> None:
    out = render(
        job(
            state="Running",
            cluster="c1",
            mode="borrowed",
            reason=None,
            estimatedStart=None,
            placement=[{"replica": "Master-0", "node": "n1", "gpus": [0, 1]}],
        ),
        NOW,
    )
    assert field(out, "State") == "Running for 55m"
    assert field(out, "Cluster") == "c1 (borrowed)"
    assert "Estimated start" not in out and "Waiting reason" not in out
    assert "Master-0   n1     0,1" in out


@pytest.mark.parametrize(
    ("found", "words"),
    [
        # earliest and latest ahead: a range, in durations and in clock times
        (
            {"earliest": "2026-11-28T14:05:00Z", "latest": "2026-11-28T14:20:00Z"},
            "in 10-25m (between 14:05 and 14:20 UTC)",
        ),
        (
            {"earliest": "2026-11-28T14:40:00Z", "latest": "2026-11-28T15:00:00Z"},
            "in 45m-1h5m (between 14:40 and 15:00 UTC)",
        ),
        # only a time: that time
        ({"time": "2026-11-28T14:10:00Z"}, "in 15m (at 14:10 UTC)"),
        ({"time": "2026-11-29T14:10:00Z"}, "in 1d (at Nov 29 14:10 UTC)"),
        # the range has begun: by its end
        (
            {"earliest": "2026-11-28T13:50:00Z", "latest": "2026-11-28T14:20:00Z"},
            "within 25m (by 14:20 UTC)",
        ),
        # never a start in the past
        ({"time": "2026-11-28T13:50:00Z"}, "any moment now (the estimate is overdue)"),
        ({"time": "2026-11-28T13:55:00Z"}, "any moment now (the estimate is overdue)"),
        (
            {"earliest": "2026-11-28T13:40:00Z", "latest": "2026-11-28T13:50:00Z"},
            "any moment now (the estimate is overdue)",
        ),
        (
            {"time": "2026-11-28T14:10:00Z", "overdue": True},
            "any moment now (the estimate is overdue)",
        ),
        ({"time": None}, "not within the forecast's reach"),
    ],
)
def test_the_estimated_start_is_relative_ranged_and_never_in_the_past(
    found: dict[str, Any], words: str
) -> None:
    assert estimate(found, NOW) == words


def test_a_declared_estimate_and_its_age_are_named() -> None:
    found = {
        "time": "2026-11-28T14:10:00Z",
        "declared": True,
        "assumes": "queue median run times",
        "computedAt": "2026-11-28T13:53:30Z",
    }
    assert estimate(found, NOW) == (
        "in 15m (at 14:10 UTC; assumes the jobs' declared run times; queue median run times; "
        "computed 1m30s ago)"
    )
    overdue = {**found, "time": "2026-11-28T13:00:00Z"}
    assert estimate(overdue, NOW).startswith("any moment now (the estimate is overdue; assumes")


def test_ages_and_amounts() -> None:
    assert ago(NOW - 0.4, NOW) == "just now"
    assert ago(NOW + 30, NOW) == "just now"
    assert ago(NOW - 45, NOW) == "45s ago"
    assert ago(NOW - 3900, NOW) == "1h5m ago"
    assert ago(None, NOW) == "-"
    assert amounts({"memory": "512Mi", "cpu": "500m", "kube-queue/max-jobs": "1"}) == (
        "0.5 CPUs, 0.5 GiB memory"
    )
    assert amounts({"nvidia.com/gpu": "1", "example.com/fpga": "2"}) == "1 GPU, 2 example.com/fpga"
    assert amounts({}) == "-"
