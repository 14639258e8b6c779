"""``fleet describe job`` prints a job's preemptions: how long ago, why, by whom, through
which quota."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.cli import remote
from fleet.cli.main import main

JOB: dict[str, Any] = {
    "name": "b3",
    "namespace": "team-b",
    "kind": "PyTorchJob",
    "apiVersion": "kubeflow.org/v1",
    "uid": "u",
    "queue": "team-b",
    "state": "Queued",
    "priorityClass": "",
    "priority": 0,
    "gangMinimum": 1,
    "podSets": [],
    "placement": [],
    "events": [],
    "preemptions": [
        {
            "time": "2026-11-28T10:00:00Z",
            "preemptor": "team-a/claim",
            "reason": "Reclaim",
            "quotaPath": ["team-b", "research", "team-a"],
            "message": "reclaimed for team-a/claim of queue team-a [...]",
        },
        {
            "time": "2026-11-28T11:00:00Z",
            "preemptor": "",
            "reason": "NodeHealth",
            "quotaPath": [],
            "message": "node n1 of east went bad",
        },
    ],
}


def test_describe_prints_the_preemptions(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote, "request", lambda *a, **k: (200, JOB))
    assert main(["describe", "job", "team-b/b3", "--server", "http://127.0.0.1:1"]) == 0
    out = capsys.readouterr().out
    lines = out.split("Preemptions:\n", 1)[1].splitlines()
    assert lines[0].split() == ["AGE", "CAUSE", "PREEMPTOR", "QUOTA", "PATH"]
    assert lines[1].split()[1:] == [
        "ago",
        "Reclaim",
        "team-a/claim",
        "team-b",
        ">",
        "research",
        ">",
        "team-a",
    ]
    assert lines[2].split()[1:] == ["ago", "NodeHealth", "-", "-"]
    assert lines[3] == "Events:"


def test_describe_prints_no_preemptions_for_a_job_never_preempted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote, "request", lambda *a, **k: (200, {**JOB, "preemptions": []}))
    assert main(["describe", "job", "team-b/b3", "--server", "http://127.0.0.1:1"]) == 0
    assert "Preemptions:" not in capsys.readouterr().out
