"""``gen-clusters``: clusters and quota sized from a trace's capacity hints load and match it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.manifests import convert
from fleet.service import wiring
from fleet.sim import layout, traces
from fleet.sim.traces import TraceError

ROOT = Path(__file__).resolve().parents[2]
PHILLY = ROOT / "data" / "traces" / "philly-vc" / "philly_vc_jobs.csv"
OPENB = ROOT / "data" / "traces" / "alibaba-openb-2023" / "openb_pod_list_default.csv"


def test_philly_vcs_get_helios_node_counts_and_the_missing_vc_a_node() -> None:
    result = layout.generate(PHILLY, "philly")
    tree, warnings = convert.load_quota(result.quota)
    (cluster,) = convert.load_clusters(result.clusters)
    assert warnings == []
    queues = {j.queue for j in traces.read_philly(PHILLY.read_text("utf-8"))}
    assert set(tree.leaves()) == queues
    sizes = wiring.vc_gpus(cluster)
    assert sizes["vc-6214e9"] == 64 * 8
    assert sizes["vc-ed69ec"] == 8 * 8
    assert sizes["vc-51b7ef"] == 8  # not in Helios' file: one node for its 8-GPU jobs
    for queue, gpus in sizes.items():
        assert tree.min_of(queue)["nvidia.com/gpu"] == gpus
        assert tree.max_of(queue) is not None
        assert tree.max_of(queue)["nvidia.com/gpu"] == 2 * gpus
    nodes = cluster.cell_config().nodes()
    assert len(nodes) % layout.RACK_NODES == 0 and len(nodes) >= 353
    assert tree.min_of("root")["nvidia.com/gpu"] == 8 * len(nodes)


def test_openb_pools_follow_the_node_list_and_tenants_share_them() -> None:
    result = layout.generate(OPENB, "openb")
    tree, _ = convert.load_quota(result.quota)
    (cluster,) = convert.load_clusters(result.clusters)
    nodes = cluster.cell_config().nodes()
    assert len(nodes) == 1213
    assert sum(n["nvidia.com/gpu"] for n in nodes.values()) == 6212
    sizes = wiring.vc_gpus(cluster)
    assert set(sizes) == set(tree.leaves()) == {f"tenant-{i}" for i in range(4)}
    assert len(set(sizes.values())) == 1  # an equal share each


def test_gen_clusters_names_a_missing_capacity_file(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text("vc,job_idx,submit_time_s,num_gpus,duration_s\na,0,0,1,1\n")
    with pytest.raises(TraceError, match=r"philly_vc_nodes_helios.csv: no such file"):
        layout.generate(trace, "philly")
    with pytest.raises(TraceError, match="philly or openb"):
        layout.generate(trace, "armada")


def _structure(cluster: object) -> list[tuple[object, ...]]:
    """Every physical cell as (depth, node, GPU index, children): the cells without names."""
    config = cluster.cell_config()  # type: ignore[attr-defined]
    out: list[tuple[object, ...]] = []

    def walk(cell: object, depth: int) -> None:
        out.append((depth, cell.node, cell.leaf_index, len(cell.children)))  # type: ignore[attr-defined]
        for child in cell.children:  # type: ignore[attr-defined]
            walk(child, depth + 1)

    for top in config.physical_cells:
        walk(top, 0)
    return out


@pytest.mark.parametrize(("trace", "fmt"), [(PHILLY, "philly"), (OPENB, "openb")])
def test_nodes_form_builds_the_cells_of_the_hand_written_form(trace: Path, fmt: str) -> None:
    hand = layout.generate(trace, fmt)
    described = layout.generate(trace, fmt, nodes=True)
    assert hand.quota == described.quota
    (by_cells,) = convert.load_clusters(hand.clusters)
    (by_nodes,) = convert.load_clusters(described.clusters)
    assert by_nodes.spec.cells is None and by_nodes.spec.nodes
    assert _structure(by_nodes) == _structure(by_cells)
    assert wiring.vc_gpus(by_nodes) == wiring.vc_gpus(by_cells)
    assert by_nodes.cell_config().nodes() == by_cells.cell_config().nodes()
