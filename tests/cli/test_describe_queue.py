"""``fleet describe queue NAME``: quota, usage, and a leaf's per-user limits with each
user's use, from ``GET /api/v1/queues/{name}``."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.cli import remote
from fleet.cli.main import main

QUEUE = {
    "name": "team-a",
    "parent": "research",
    "leaf": True,
    "namespaces": ["team-a"],
    "min": {"nvidia.com/gpu": "16"},
    "max": {"nvidia.com/gpu": "32"},
    "used": {"nvidia.com/gpu": "12"},
    "borrowed": {},
    "admitted": 3,
    "perUser": {
        "limits": {"nvidia.com/gpu": "8", "runningJobs": "2"},
        "users": [
            {"user": "alice", "runningJobs": 2, "resources": {"nvidia.com/gpu": "8"}},
            {"user": "bob", "runningJobs": 1, "resources": {"nvidia.com/gpu": "4"}},
        ],
    },
    "pending": [],
}


def test_describe_queue_prints_each_users_use(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str] = []

    def answer(server: str, method: str, path: str, *args: Any, **kw: Any) -> tuple[int, Any]:
        asked.append(f"{method} {path}")
        return 200, QUEUE

    monkeypatch.setattr(remote, "request", answer)
    code = main(["describe", "queue", "team-a", "--server", "http://127.0.0.1:1"])
    out = capsys.readouterr().out
    assert code == 0
    assert asked == ["GET /api/v1/queues/team-a"]
    assert "Per user:       nvidia.com/gpu=8, runningJobs=2" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("  ")]
    assert rows == [
        ["USER", "JOBS", "RESOURCES"],
        ["alice", "2", "gpu=8"],
        ["bob", "1", "gpu=4"],
    ]
