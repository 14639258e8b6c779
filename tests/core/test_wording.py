"""Figures in plain words (:mod:`fleet.core.wording`): units, counts, durations."""

from __future__ import annotations

import pytest

from fleet.core import wording
from fleet.core.resources import parse_quantity


@pytest.mark.parametrize(
    ("resource", "text", "words"),
    [
        ("nvidia.com/gpu", "8", "8 GPUs"),
        ("nvidia.com/gpu", "1", "1 GPU"),
        ("gpu.fleet.io/A100", "4", "4 A100 GPUs"),
        ("cpu", "4", "4 CPUs"),
        ("cpu", "1", "1 CPU"),
        ("cpu", "500m", "0.5 CPUs"),
        ("memory", "64Gi", "64 GiB memory"),
        ("memory", "512Mi", "0.5 GiB memory"),
        ("memory", "1", "<0.01 GiB memory"),
        ("kube-queue/max-jobs", "3", "3 jobs"),
        ("kube-queue/max-jobs", "1", "1 job"),
        ("example.com/fpga", "2", "2 example.com/fpga"),
    ],
)
def test_an_amount_has_its_unit(resource: str, text: str, words: str) -> None:
    assert wording.amount(resource, parse_quantity(resource, text)) == words


def test_usage_against_a_limit_and_a_bare_figure() -> None:
    assert wording.used_of("nvidia.com/gpu", 45, 48) == "45 of 48 GPUs"
    assert wording.used_of("nvidia.com/gpu", 1, 1) == "1 of 1 GPU"
    assert wording.used_of("cpu", 40_000, 40_000) == "40 of 40 CPUs"
    assert wording.used_of("memory", 0, 2**30) == "0 of 1 GiB memory"
    assert wording.figure("nvidia.com/gpu", 8) == "8"
    assert wording.figure("memory", 32 * 2**30) == "32 GiB"
    assert wording.figure("cpu", 1500) == "1.5"


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (-5, "0s"),
        (0, "0s"),
        (45.9, "45s"),
        (75, "1m15s"),
        (300, "5m"),
        (754, "12m"),
        (3600, "1h"),
        (3900, "1h5m"),
        (86_400, "1d"),
        (90_000, "1d1h"),
    ],
)
def test_a_duration_reads_as_people_write_it(seconds: float, words: str) -> None:
    assert wording.duration(seconds) == words


def test_counts_are_singular_for_one() -> None:
    assert (wording.count(1, "pod"), wording.count(4, "pod")) == ("1 pod", "4 pods")
