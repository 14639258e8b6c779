"""Tests of Kubernetes quantity parsing and the exact resource vector."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from fleet.core.resources import (
    GPU,
    MAX_JOBS,
    ONE_JOB,
    ZERO,
    QuantityError,
    Resources,
    format_quantity,
    parse_quantity,
    parse_value,
    typed_gpu,
)

Ki = 2**10

PARSE = [
    # cpu is kept in milli-cores
    ("cpu", "1", 1000),
    ("cpu", "500m", 500),
    ("cpu", "0.5", 500),
    ("cpu", ".5", 500),
    ("cpu", "1.", 1000),
    ("cpu", "+2", 2000),
    ("cpu", "1e3", 1_000_000),
    ("cpu", "1E-3", 1),
    ("cpu", "2k", 2_000_000),
    ("cpu", "100u", 1),  # sub-milli rounds up
    ("cpu", "1n", 1),
    ("cpu", "0", 0),
    ("cpu", "0.0001", 1),
    ("cpu", 2, 2000),
    ("cpu", 0.25, 250),
    # bytes, rounded up
    ("memory", "1Ki", Ki),
    ("memory", "1Mi", Ki**2),
    ("memory", "1.5Gi", 3 * 2**29),
    ("memory", "1Ti", 2**40),
    ("memory", "1Pi", 2**50),
    ("memory", "1Ei", 2**60),
    ("memory", "1k", 1000),
    ("memory", "1M", 10**6),
    ("memory", "1G", 10**9),
    ("memory", "1T", 10**12),
    ("memory", "1P", 10**15),
    ("memory", "1E", 10**18),
    ("memory", "1m", 1),
    ("memory", "1500m", 2),
    ("memory", "0.1Ki", 103),
    ("ephemeral-storage", "1Gi", 2**30),
    ("hugepages-2Mi", "2Mi", 2 * Ki**2),
    # counts are whole numbers
    (GPU, "8", 8),
    (GPU, "1e1", 10),
    (GPU, "1k", 1000),
    (GPU, "2000m", 2),
    (MAX_JOBS, "10000000000", 10_000_000_000),
    (typed_gpu("A100"), 4, 4),
]


@pytest.mark.parametrize(
    ("resource", "text", "expected"), PARSE, ids=[f"{r}={t!r}" for r, t, _ in PARSE]
)
def test_parse_quantity(resource: str, text: str | int | float, expected: int) -> None:
    assert parse_quantity(resource, text) == expected


BAD = [
    ("cpu", "1.2.3", "not a Kubernetes quantity"),
    ("memory", "10 Gi", "not a Kubernetes quantity"),
    ("cpu", "", "not a Kubernetes quantity"),
    ("cpu", "abc", "not a Kubernetes quantity"),
    ("cpu", " 1", "not a Kubernetes quantity"),  # Kubernetes rejects surrounding spaces
    ("cpu", "1 ", "not a Kubernetes quantity"),
    ("cpu", "1\n", "not a Kubernetes quantity"),
    ("memory", "1Gb", "not a Kubernetes quantity"),
    ("memory", "1K", "not a Kubernetes quantity"),
    ("cpu", "e3", "not a Kubernetes quantity"),
    ("cpu", "1e", "not a Kubernetes quantity"),
    ("cpu", "١", "not a Kubernetes quantity"),  # only ASCII digits
    ("cpu", "1e999999999", "out of range"),
    ("cpu", "9" * 5000, "more than 64 digits"),
    ("memory", "1." + "0" * 5000 + "Gi", "more than 64 digits"),
    ("cpu", "-1", "negative"),
    ("memory", "-1Gi", "negative"),
    (GPU, "-1", "negative"),
    (GPU, "0.5", "whole number"),
    (GPU, "500m", "whole number"),
    (MAX_JOBS, "1.5", "whole number"),
]


@pytest.mark.parametrize(
    ("resource", "text", "message"),
    BAD,
    ids=[f"{r}={t!r}" if len(t) <= 20 else f"{r}={t[:8]!r}...({len(t)} chars)" for r, t, _ in BAD],
)
def test_parse_quantity_rejects(resource: str, text: str, message: str) -> None:
    with pytest.raises(QuantityError, match=message) as info:
        parse_quantity(resource, text)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("value", [True, None, [1]], ids=["bool", "none", "list"])
def test_parse_value_rejects_non_quantities(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_value(value)


def test_quantity_error_is_a_value_error() -> None:
    assert issubclass(QuantityError, ValueError)


FORMAT = [
    ("cpu", 1000, "1"),
    ("cpu", 500, "500m"),
    ("cpu", 1500, "1500m"),
    ("cpu", 0, "0"),
    ("memory", 2**30, "1Gi"),
    ("memory", 3 * 2**29, "1536Mi"),
    ("memory", 1000, "1000"),
    ("memory", 0, "0"),
    ("memory", 2**60, "1Ei"),
    (GPU, 8, "8"),
]


@pytest.mark.parametrize(
    ("resource", "amount", "text"), FORMAT, ids=[f"{r}={a}" for r, a, _ in FORMAT]
)
def test_format_quantity_round_trips(resource: str, amount: int, text: str) -> None:
    assert format_quantity(resource, amount) == text
    assert parse_quantity(resource, text) == amount


# Vectors ---------------------------------------------------------------------


def test_zero_entries_are_dropped_so_equality_is_structural() -> None:
    assert Resources({"cpu": 0, GPU: 1}) == Resources({GPU: 1})
    assert hash(Resources({"cpu": 0, GPU: 1})) == hash(Resources({GPU: 1}))
    assert len(Resources({"cpu": 0})) == 0
    assert Resources({"cpu": 0}) == ZERO


def test_absent_names_read_as_zero() -> None:
    r = Resources({"cpu": 5})
    assert r["memory"] == 0
    assert r.get("memory") == 0
    assert "memory" not in r
    assert "cpu" in r


def test_equality_with_plain_mappings() -> None:
    assert Resources({"cpu": 5}) == {"cpu": 5, "memory": 0}
    assert Resources({"cpu": 5}) != {"cpu": 6}
    assert Resources({"cpu": 5}) != 5


def test_parse_builds_from_yaml_quantities() -> None:
    assert Resources.parse({"cpu": "500m", "memory": "1Gi", GPU: 2}) == {
        "cpu": 500,
        "memory": 2**30,
        GPU: 2,
    }


def test_add_and_sub() -> None:
    a = Resources({"cpu": 5, GPU: 1})
    b = Resources({"cpu": 5, "memory": 3})
    assert a + b == {"cpu": 10, GPU: 1, "memory": 3}
    assert a - a == ZERO
    assert (a - b) == {GPU: 1, "memory": -3}
    assert a + ONE_JOB == {"cpu": 5, GPU: 1, MAX_JOBS: 1}
    assert a + {} == a


def test_arithmetic_does_not_mutate() -> None:
    a = Resources({"cpu": 5})
    _ = a + {"cpu": 1}
    _ = a - {"cpu": 5}
    assert a == {"cpu": 5}


def test_scale_and_clamp() -> None:
    a = Resources({"cpu": 5, GPU: -1})
    assert a.scale(3) == {"cpu": 15, GPU: -3}
    assert a.scale(0) == ZERO
    assert a.clamp_min_zero() == {"cpu": 5}
    assert not a.is_nonnegative()
    assert a.clamp_min_zero().is_nonnegative()


LE = [
    pytest.param({"cpu": 1}, {"cpu": 1}, True, id="equal"),
    pytest.param({"cpu": 1}, {"cpu": 2, GPU: 1}, True, id="smaller-and-absent"),
    pytest.param({"cpu": 1, GPU: 1}, {"cpu": 2}, False, id="absent-on-right-is-zero"),
    pytest.param({}, {"cpu": -1}, False, id="negative-on-right"),
    pytest.param({"cpu": -1}, {}, True, id="negative-on-left"),
]


@pytest.mark.parametrize(("left", "right", "expected"), LE)
def test_le(left: dict[str, int], right: dict[str, int], expected: bool) -> None:
    assert Resources(left).le(right) is expected
    assert Resources(left).any_gt(right) is not expected


FIRST_OVER = [
    pytest.param({"cpu": 5}, {"cpu": 5}, None, id="at-limit"),
    pytest.param({"cpu": 6}, {"cpu": 5}, "cpu", id="over"),
    pytest.param({"cpu": 6, GPU: 9}, {GPU: 8}, GPU, id="only-limit-names-count"),
    pytest.param({"cpu": 6}, {}, None, id="absent-is-unlimited"),
    pytest.param({}, {"cpu": 0}, None, id="zero-limit-zero-use"),
]


@pytest.mark.parametrize(("used", "limit", "expected"), FIRST_OVER)
def test_first_over(used: dict[str, int], limit: dict[str, int], expected: str | None) -> None:
    assert Resources(used).first_over(Resources(limit) if limit else limit) == expected


def test_only_keeps_the_named_resources() -> None:
    assert Resources({"cpu": 1, GPU: 2}).only([GPU, "memory"]) == {GPU: 2}


def test_views_match_the_mapping() -> None:
    r = Resources({"cpu": 1, GPU: 2})
    assert dict(r.items()) == {"cpu": 1, GPU: 2}
    assert set(r.keys()) == {"cpu", GPU}
    assert sorted(r.values()) == [1, 2]
    assert dict(r) == {"cpu": 1, GPU: 2}


def test_to_quantities_and_repr() -> None:
    r = Resources({"memory": 2**30, "cpu": 500})
    assert r.to_quantities() == {"cpu": "500m", "memory": "1Gi"}
    assert repr(r) == "Resources({'cpu': '500m', 'memory': '1Gi'})"
    assert Resources.parse(r.to_quantities()) == r


def test_typed_gpu_name() -> None:
    assert typed_gpu("A100") == "gpu.fleet.io/A100"


def test_a_vector_reads_as_a_mapping() -> None:
    """Not a subclass of Mapping (ADR 0035), but registered as one and read as one."""
    r = Resources({"cpu": 1, GPU: 2})
    assert isinstance(r, Mapping)
    assert {**r} == {"cpu": 1, GPU: 2}
    assert Resources(r) == r
    assert Resources.limits(Resources({GPU: 2})) == {GPU: 2}
    assert r + Resources({"cpu": 1}) == {"cpu": 2, GPU: 2}
    assert r.le(Resources({"cpu": 1, GPU: 2})) and not r.le({"cpu": 1})
    assert r.first_over(Resources({GPU: 1})) == GPU
    assert r != Resources({GPU: 2}) and r == Resources({GPU: 2, "cpu": 1})
