"""The same input gives the same decisions, byte for byte, whatever ``PYTHONHASHSEED`` is.

String hashes (and so the iteration order of sets and frozensets of job keys)
change with the hash seed; decisions must not.  Each seed runs
:mod:`tests.core.determinism_scenarios` (quota reclaim, in-queue priority
preemption, gangs with ``minAvailable``, opportunistic jobs; each with the
capacity placer and the cell placer) in a fresh interpreter, and the printed
decisions are compared as they are, unsorted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.core import determinism_scenarios

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ("0", "1", "2", "12345")


@cache
def run(seed: str) -> dict[str, str]:
    """Scenario header -> its printed decisions, from a fresh interpreter under ``seed``."""
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-m", "tests.core.determinism_scenarios"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    sections: dict[str, str] = {}
    header = ""
    for line in done.stdout.splitlines(keepends=True):
        if line.startswith("== "):
            header = line.strip()
            sections[header] = ""
        else:
            sections[header] += line
    return sections


RUNS = [
    f"== {scenario} / {placer}"
    for scenario in determinism_scenarios.SCENARIOS
    for placer in determinism_scenarios.PLACERS
]


@pytest.mark.parametrize("header", RUNS)
def test_decisions_do_not_depend_on_the_hash_seed(header: str) -> None:
    first = run(SEEDS[0])
    assert header in first
    assert "Admit(" in first[header]  # the scenario does decide something
    for seed in SEEDS[1:]:
        assert run(seed)[header] == first[header], f"PYTHONHASHSEED={seed} differs"


def test_the_reclaim_scenario_releases_several_jobs_at_once() -> None:
    # The released jobs of one placement question are a frozenset: the case that
    # depended on the hash seed before the placers ordered them.
    for placer in determinism_scenarios.PLACERS:
        text = run(SEEDS[0])[f"== reclaim / {placer}"]
        assert text.count("Preempt(") >= 2, text
