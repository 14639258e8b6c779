"""A quota node's ``max`` of 0 is a limit of 0, not the absence of a limit."""

from __future__ import annotations

import textwrap

import pytest

from fleet.core.quota import QuotaBlock, QuotaError
from fleet.core.resources import MAX_JOBS, Resources
from fleet.manifests import convert
from fleet.manifests.errors import SpecError

GPU = "nvidia.com/gpu"


def tree_yaml(leaf: str, *, parent_max: str = "{nvidia.com/gpu: 16, cpu: 64}") -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: scheduling.sigs.k8s.io/v1beta1
        kind: ElasticQuotaTree
        metadata: {{name: t}}
        spec:
          root:
            name: root
            min: {{nvidia.com/gpu: 16, cpu: 64}}
            max: {{nvidia.com/gpu: 16, cpu: 64}}
            children:
              - name: mid
                max: {parent_max}
                children:
                  - {{name: frozen, namespaces: [frozen], {leaf}}}
              - {{name: other, namespaces: [other]}}
        """
    )


def request(**amounts: int) -> Resources:
    return Resources({MAX_JOBS: 1, **amounts})


def test_a_max_of_zero_blocks_that_resource_and_no_other() -> None:
    tree, _ = convert.load_quota(tree_yaml("max: {nvidia.com/gpu: 0}"))
    gpu = tree.classify("frozen", request(**{GPU: 1}), priority=0, preemptible=True)
    assert isinstance(gpu, QuotaBlock)
    assert (gpu.node, gpu.resource, gpu.limit) == ("frozen", GPU, 0)
    assert "is full: 0 of 0 GPUs used" in gpu.reason
    cpu = tree.classify("frozen", request(cpu=4), priority=0, preemptible=True)
    assert not isinstance(cpu, QuotaBlock)
    assert tree.max_of("frozen") == Resources.limits({GPU: 0})
    assert tree.max_of("frozen") != Resources()  # a limit of 0 is not "no limit"


def test_a_max_of_zero_on_an_inner_node_blocks_its_leaves() -> None:
    tree, _ = convert.load_quota(tree_yaml("min: {}", parent_max="{nvidia.com/gpu: 0}"))
    block = tree.classify("frozen", request(**{GPU: 1}), priority=0, preemptible=True)
    assert isinstance(block, QuotaBlock)
    assert (block.node, block.limit) == ("mid", 0)


@pytest.mark.parametrize(
    ("leaf", "parent_max", "says"),
    [
        ("min: {nvidia.com/gpu: 4}, max: {nvidia.com/gpu: 0}", None, "above max"),
        ("max: {nvidia.com/gpu: 4}", "{nvidia.com/gpu: 0}", "above the max"),
    ],
)
def test_limits_of_zero_take_part_in_validation(
    leaf: str, parent_max: str | None, says: str
) -> None:
    text = tree_yaml(leaf, parent_max=parent_max or "{nvidia.com/gpu: 16, cpu: 64}")
    with pytest.raises((QuotaError, SpecError)) as e:
        convert.load_quota(text)
    assert says in str(e.value)


def test_a_root_with_zero_entries_in_min_and_max_has_no_warning() -> None:
    text = tree_yaml("min: {}").replace(
        "max: {nvidia.com/gpu: 16, cpu: 64}\n    children",
        "max: {nvidia.com/gpu: 16, cpu: 64, memory: 0}\n    children",
        1,
    )
    assert "memory: 0" in text
    _, warnings = convert.load_quota(text)
    assert warnings == []
