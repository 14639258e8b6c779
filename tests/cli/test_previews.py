"""Dry runs and previews in plain words: edit's diff, simulate's comparison, plan's sections."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.cli import previews
from fleet.cli.main import main
from tests.cli.test_plan import plan_args, pytorchjob

NODE = {
    "name": "team-a",
    "min": {"nvidia.com/gpu": 16, "cpu": 256},
    "max": {"nvidia.com/gpu": 32},
    "namespaces": ["team-a"],
}


def test_every_patched_field_is_shown_before_and_after() -> None:
    patch = {
        "max": {"nvidia.com/gpu": "16", "cpu": "64"},
        "min": {"cpu": None},
        "namespaces": ["team-a", "team-x"],
    }
    assert previews.node_changes(NODE, patch) == [
        "max nvidia.com/gpu: 32 -> 16",
        "max cpu: unlimited -> 64",
        "min cpu: 256 -> (none)",
        "namespaces: team-a -> team-a, team-x",
    ]
    assert previews.node_changes(NODE, {"max": None}) == ["max: nvidia.com/gpu=32 -> unlimited"]
    assert previews.node_changes(NODE, {"max": {"nvidia.com/gpu": "32"}}) == [
        "max nvidia.com/gpu: 32 (unchanged)"
    ]


def test_a_change_that_touches_no_job_says_so() -> None:
    assert previews.affected({"overLimit": [], "moved": [], "failed": []}) == [
        "no running job affected"
    ]
    over = {
        "node": "team-a", "limit": "max", "resource": "nvidia.com/gpu", "used": "24",
        "allowed": "16", "reclaimable": ["team-a/b", "team-a/a"],
    }  # fmt: skip
    moved = {"job": "team-x/j", "fromQueue": "team-b", "toQueue": "team-a"}
    assert previews.affected({"overLimit": [over], "moved": [moved]}) == [
        "team-a would be over its max on nvidia.com/gpu (24 used, 16 allowed); "
        "reclaimable first: team-a/b, team-a/a",
        "job team-x/j would move from team-b to team-a",
    ]


def test_the_edit_dry_run_prints_the_diff_and_what_it_affects(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = {"spec": {"root": {"name": "root", "children": [NODE]}}}
    calls: list[tuple[str, str]] = []

    def request(server: object, method: str, path: str, *a: object) -> tuple[int, Any]:
        calls.append((method, path))
        if method == "GET":
            return 200, tree
        return 200, {"dryRun": True, "version": None, "overLimit": [], "moved": [], "failed": []}

    monkeypatch.setattr("fleet.cli.remote.request", request)
    argv = ["edit", "quota", "team-a", "--max", "nvidia.com/gpu=16", "--dry-run"]
    assert main(argv) == 0
    assert capsys.readouterr().out == (
        "quota node team-a: dry run, nothing changed; the change would set\n"
        "  max nvidia.com/gpu: 32 -> 16\n"
        "and would affect\n"
        "  no running job affected\n"
    )
    assert calls == [
        ("GET", "/api/v1/quota-tree"),
        ("PATCH", "/api/v1/quota-tree/nodes/team-a?dryRun=All"),
    ]


def simulation(*jobs: dict[str, Any]) -> dict[str, Any]:
    return {
        "assumes": "declared run times",
        "jobs": list(jobs),
        "preempted": [{"job": "team-a/r", "current": 1, "proposed": 1}],
        "queues": [{"name": "team-a", "currentWaitSeconds": 3900.0, "proposedWaitSeconds": 720.4}],
    }


def test_simulate_compares_starts_as_they_are_shown_and_explains_its_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    result = simulation(
        # 0.4 s apart: the same time on screen, so not "sooner".
        {"job": "team-a/same", "queue": "team-a", "current": "2026-11-28T14:30:00.700000Z",
         "proposed": "2026-11-28T14:30:00.300000Z", "change": "sooner"},
        {"job": "team-a/soon", "queue": "team-a", "current": "2026-11-28T15:30:00Z",
         "proposed": "2026-11-28T14:25:00+00:00", "change": "sooner"},
        {"job": "team-a/late", "queue": "team-a", "current": "2026-11-28T14:30:00Z",
         "proposed": "2026-11-28T14:30:40Z", "change": "later"},
        {"job": "team-a/new", "queue": "team-a", "current": None,
         "proposed": "2026-11-28T14:30:40Z", "change": "starts"},
    )  # fmt: skip
    monkeypatch.setattr("fleet.cli.remote.request", lambda *a, **k: (200, result))
    tree = tmp_path / "tree.yaml"
    tree.write_text("kind: ElasticQuotaTree\n")
    assert main(["simulate", "--from-live", "127.0.0.1:1", "--quota", str(tree)]) == 0
    out = capsys.readouterr().out
    change = {line.split()[0]: line.split("  ")[-1].strip() for line in out.splitlines() if line}
    assert change["team-a/same"] == "same"
    assert change["team-a/soon"] == "1h5m sooner"
    assert change["team-a/late"] == "40s later"
    assert change["team-a/new"] == "starts"
    assert "with the tree in force (NOW) and with the proposed tree (PROPOSED)" in out
    assert "how many times each is preempted" in out
    assert "team-a   1h5m   12m" in out


def test_plan_says_when_nothing_is_preempted_or_waits(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    running = tmp_path / "running.yaml"
    running.write_text(pytorchjob("old", "ns-a", 1, 4))
    args = plan_args(tmp_path, pytorchjob("new", "ns-b", 1, 4), "--running", str(running))
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "PREEMPTED (0)\nno running job preempted" in out
    assert "WAITING (0)\nno job waits" in out
