"""Small traces whose outcome is known, replayed on the real loop under each policy.

The traces are ``policies/sim/*.yaml`` (the HiveD lab's experiments and ACK
One's walkthrough); their headers explain the expected times, worked out by
hand from the semantics in docs/design/core-and-cycle.md (the quota tree, the
cycle, the placers).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.manifests import convert
from fleet.sim import engine, traces
from fleet.sim.engine import Replay

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"
H = 3600.0
M = 60.0

#: trace -> (clusters file, quota file)
SETUPS = {
    "lab-vc-safety": ("clusters/lab-1.yaml", "lab/quota-two-vcs-borrowing.yaml"),
    "lab-priority": ("clusters/lab-1.yaml", "lab/quota-two-vcs.yaml"),
    "lab-gang": ("clusters/lab-2.yaml", "lab/quota-one-vc.yaml"),
    "lab-opportunistic": ("clusters/lab-1.yaml", "lab/quota-two-vcs.yaml"),
    "lab-incremental": ("clusters/lab-2.yaml", "lab/quota-one-vc.yaml"),
    "ack-walkthrough": ("clusters/lab-2.yaml", "quota/ack-example.yaml"),
}

#: (trace, policy) -> job -> (first start, end, preemptions, mode of the last run)
EXPECTED: dict[tuple[str, str], dict[str, tuple[float, float, int, str]]] = {
    ("lab-vc-safety", "fleet"): {
        "lab-vc1/vc1-0": (0, H, 0, "guaranteed"),
        "lab-vc1/vc1-1": (0, 2 * H, 1, "guaranteed"),  # borrowed, reclaimed at 10m, again at 1h
        "lab-vc1/vc1-2": (H + 10 * M, 2 * H + 10 * M, 0, "borrowed"),
        "lab/default-0": (10 * M, H + 10 * M, 0, "guaranteed"),
    },
    ("lab-vc-safety", "fleet-no-memory"): {  # the tree sets no fairSharing: fleet's answer
        "lab-vc1/vc1-0": (0, H, 0, "guaranteed"),
        "lab-vc1/vc1-1": (0, 2 * H, 1, "guaranteed"),
        "lab-vc1/vc1-2": (H + 10 * M, 2 * H + 10 * M, 0, "borrowed"),
        "lab/default-0": (10 * M, H + 10 * M, 0, "guaranteed"),
    },
    ("lab-vc-safety", "private"): {
        "lab-vc1/vc1-0": (0, H, 0, "guaranteed"),
        "lab-vc1/vc1-1": (H, 2 * H, 0, "guaranteed"),
        "lab-vc1/vc1-2": (2 * H, 3 * H, 0, "guaranteed"),
        "lab/default-0": (10 * M, H + 10 * M, 0, "guaranteed"),
    },
    ("lab-vc-safety", "capacity"): {
        "lab-vc1/vc1-0": (0, H, 0, "guaranteed"),
        "lab-vc1/vc1-1": (0, 2 * H, 1, "guaranteed"),
        "lab-vc1/vc1-2": (H + 10 * M, 2 * H + 10 * M, 0, "borrowed"),
        "lab/default-0": (10 * M, H + 10 * M, 0, "guaranteed"),
    },
    ("lab-priority", "fleet"): {
        "lab-vc1/low": (0, M + 10 * M + H, 1, "guaranteed"),
        "lab-vc1/high": (M, 11 * M, 0, "guaranteed"),
    },
    ("lab-gang", "fleet"): {
        "lab/one-node": (0, 10 * M, 0, "guaranteed"),
        "lab/two-nodes": (10 * M, 20 * M, 0, "guaranteed"),
    },
    ("lab-gang", "capacity"): {
        "lab/one-node": (0, 10 * M, 0, "guaranteed"),
        "lab/two-nodes": (10 * M, 20 * M, 0, "guaranteed"),
    },
    ("lab-opportunistic", "fleet"): {
        "lab-vc1/prod": (0, H, 0, "guaranteed"),
        "lab-vc1/oppo": (0, 2 * H, 1, "opportunistic"),  # on carol, reclaimed at 5m, then on dan
        "lab/test": (5 * M, H + 5 * M, 0, "guaranteed"),
    },
    ("lab-opportunistic", "private"): {  # opportunistic jobs still use idle cells
        "lab-vc1/prod": (0, H, 0, "guaranteed"),
        "lab-vc1/oppo": (0, 2 * H, 1, "opportunistic"),
        "lab/test": (5 * M, H + 5 * M, 0, "guaranteed"),
    },
    ("lab-incremental", "fleet"): {
        "lab/one-node": (0, 10 * M, 0, "guaranteed"),
        "lab/grow": (0, 10 * M, 0, "guaranteed"),  # one worker at once, no gang to wait for
    },
    ("ack-walkthrough", "fleet"): {
        "default/ack-0": (0, 10 * M, 0, "borrowed"),  # child-2 has no min: all borrowed
        "default/ack-1": (10 * M, 20 * M, 0, "borrowed"),
        "default/ack-2": (20 * M, 30 * M, 0, "borrowed"),
    },
    ("ack-walkthrough", "private"): {  # max-jobs still holds; no min to lower max to
        "default/ack-0": (0, 10 * M, 0, "borrowed"),
        "default/ack-1": (10 * M, 20 * M, 0, "borrowed"),
        "default/ack-2": (20 * M, 30 * M, 0, "borrowed"),
    },
}


def traces_of(trace: str) -> tuple[list[traces.TraceJob], str, str]:
    """The jobs of a trace of ``policies/sim``, its quota tree and its clusters."""
    clusters_file, quota_file = SETUPS[trace]
    tree_text = (POLICIES / quota_file).read_text(encoding="utf-8")
    clusters_text = (POLICIES / clusters_file).read_text(encoding="utf-8")
    tree, _ = convert.load_quota(tree_text)
    clusters = convert.load_clusters(clusters_text)
    text = (POLICIES / "sim" / f"{trace}.yaml").read_text(encoding="utf-8")
    return traces.read_fleet(text, tree, clusters), tree_text, clusters_text


def replay(trace: str, policy: str) -> Replay:
    jobs, tree_text, clusters_text = traces_of(trace)
    return engine.run(jobs, tree_text, clusters_text, policy, sample_every=60.0)


@pytest.mark.parametrize(("trace", "policy"), list(EXPECTED), ids=[f"{t}-{p}" for t, p in EXPECTED])
def test_a_small_trace_starts_and_ends_every_job_when_worked_out_by_hand(
    trace: str, policy: str
) -> None:
    result = replay(trace, policy)
    got = {j.key: (j.start, j.end, j.preemptions, j.mode) for j in result.jobs}
    assert got == EXPECTED[(trace, policy)]
    assert all(j.state == "Succeeded" for j in result.jobs)


def test_borrowing_shortens_the_wait_that_a_private_partition_imposes() -> None:
    fleet = {j.key: j.queueing_delay for j in replay("lab-vc-safety", "fleet").jobs}
    private = {j.key: j.queueing_delay for j in replay("lab-vc-safety", "private").jobs}
    assert fleet["lab-vc1/vc1-1"] == 0 and private["lab-vc1/vc1-1"] == H
    assert fleet["lab-vc1/vc1-2"] == H + 10 * M and private["lab-vc1/vc1-2"] == 2 * H


def test_samples_follow_the_queues_over_virtual_time() -> None:
    result = replay("lab-vc-safety", "fleet")
    at = {s.time: s for s in result.samples}
    # At 5m vc1 runs two jobs, one of them on default's GPU; vc1-2 waits.
    assert at[5 * M].used == {"default": 0, "vc1": 2}
    assert at[5 * M].borrowed == {"default": 0, "vc1": 1}
    assert at[5 * M].pending == {"default": 0, "vc1": 1}
    # At 15m default has its GPU back, vc1-1 waits again.
    assert at[15 * M].used == {"default": 1, "vc1": 1}
    assert at[15 * M].pending == {"default": 0, "vc1": 2}
    assert result.horizon == 2 * H + 10 * M
    assert result.gpus == 2
