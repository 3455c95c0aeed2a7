"""Unit tests of the cluster state, the cost terms and placement."""

import pytest

from unicron_plan import load_instance, solve
from unicron_plan.core import cost
from unicron_plan.core.cluster import build_state
from unicron_plan.core.problem import action_of, build_problem

from conftest import ROOT


def _inst(name):
    return load_instance(ROOT / "instances" / f"{name}.json")


def test_node_isolation_drains_node_that_lost_a_gpu():
    st = build_state(_inst("tiny-node-isolation"))
    assert st.drained_nodes == ["n0"] and st.capacity() == {"a800": 0} and st.hit["a"]


def test_gpu_isolation_removes_only_failed_gpu():
    st = build_state(_inst("tiny-gpu-isolation"))
    assert st.drained_nodes == [] and st.capacity() == {"a800": 7} and st.hit["a"]


def test_d_run_from_mtbf_counts_nodes_in_service():
    inst = _inst("tiny-mtbf-horizon")
    st = build_state(inst)
    assert st.nodes_in_service() == 3
    assert cost.d_run_seconds(inst, 3) == 1000.0 * 3600 / 3


def test_nodes_already_fully_failed_are_not_in_service(tiny_instance):
    tiny_instance["cost"] = {"node_mtbf_hours": 10.0, "default_transition_seconds": 600.0}
    tiny_instance["cluster"]["nodes"][0]["failed_gpus"] = list(range(8))
    tiny_instance["jobs"][0]["current"] = {"gpus": 8, "nodes": ["n1"]}
    tiny_instance["event"] = None
    st = build_state(load_instance(tiny_instance))
    assert st.nodes_in_service() == 1


def test_gain_charges_penalty_only_when_changed():
    assert cost.gain(10.0, 8, 8, 10.0, False, 100.0, 5.0) == 1000.0
    assert cost.gain(10.0, 8, 8, 10.0, True, 100.0, 5.0) == 1000.0 - 50.0
    assert cost.gain(6.0, 4, 8, 10.0, False, 100.0, 5.0) == 600.0 - 50.0
    assert cost.gain(0.0, 0, 0, 0.0, False, 100.0, 5.0) == 0.0


@pytest.mark.parametrize("x,y,hit,moved,expected", [
    (0, 0, False, False, "idle"), (8, 0, False, False, "suspend"), (0, 8, False, False, "resume"),
    (16, 8, True, False, "shrink"), (8, 16, False, False, "grow"), (8, 8, True, False, "restart"),
    (8, 8, False, True, "restart"), (8, 8, False, False, "keep")])
def test_actions(x, y, hit, moved, expected):
    assert action_of(x, y, hit, moved) == expected


def test_shared_nodes_split_found_by_flow(tiny_instance):
    tiny_instance["jobs"] = [
        {"id": "a", "weight": 1.0, "throughput": {"gpu_type": "a800", "tflops": {"6": 1.0, "10": 2.0}},
         "current": {"gpus": 10, "nodes": ["n0", "n1"]}},
        {"id": "b", "weight": 1.0, "throughput": {"gpu_type": "a800", "tflops": {"6": 1.0}},
         "current": {"gpus": 6, "nodes": ["n0"]}}]
    st = build_state(load_instance(tiny_instance))
    assert st.previous["b"] == {"n0": 6}
    assert st.previous["a"] == {"n0": 2, "n1": 8}


def test_unchanged_jobs_stay_and_shrinking_jobs_keep_their_nodes():
    inst = _inst("small-shared-node-failure")
    plan = solve(inst)
    by = {j.id: j for j in plan.jobs}
    assert by["j3"].action == "keep" and sorted(by["j3"].nodes) == ["n2", "n3"]
    # j1 held 8 GPUs on n0 before the failure of n1: it keeps GPUs there.
    assert "n0" in by["j1"].nodes
    assert by["j1"].gpus + by["j2"].gpus == 8


def test_placement_moves_fewest_gpus_and_prefers_whole_nodes():
    inst = load_instance({
        "schema_version": "1", "name": "p",
        "cluster": {"gpu_types": {"a": {"peak_tflops": 1, "memory_gib": 1, "intra_node_gbps": 1,
                                        "inter_node_gbps": 1}},
                    "nodes": [{"id": f"n{k}", "gpu_type": "a", "gpus": 8} for k in range(4)]},
        "jobs": [{"id": "grower", "weight": 1.0,
                  "throughput": {"gpu_type": "a", "tflops": {"4": 1.0, "12": 10.0}},
                  "current": {"gpus": 4, "nodes": ["n1"]}},
                 {"id": "small", "weight": 1.0, "throughput": {"gpu_type": "a", "tflops": {"4": 1.0}},
                  "current": {"gpus": 4, "nodes": ["n2"]}}],
        "cost": {"expected_run_seconds": 1000.0, "default_transition_seconds": 1.0}})
    plan = solve(inst)
    grower = next(j for j in plan.jobs if j.id == "grower")
    split = {p.node: p.gpus for p in grower.placement}
    assert grower.gpus == 12 and split["n1"] >= 4  # kept its 4 GPUs in place
    # It first fills its own node, then the tightest fragment (n2's 4 free GPUs),
    # leaving n0 and n3 whole for later jobs.
    assert split == {"n1": 8, "n2": 4}
    assert build_problem(inst).state.previous["grower"] == {"n1": 4}
