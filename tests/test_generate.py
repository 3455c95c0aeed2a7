"""The generator: seeded, byte-identical, valid, jagged as documented."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from typer.testing import CliRunner

from unicron_plan import api
from unicron_plan.cli import app
from unicron_plan.tools.generate import MODEL_MIX, generate_instance, generate_scenario, synthetic_curve
from unicron_plan.io import dumps


def test_same_seed_same_bytes_and_different_seed_different_bytes():
    a = dumps(generate_instance(3, gpus=1024, jobs=12))
    assert a == dumps(generate_instance(3, gpus=1024, jobs=12))
    assert a != dumps(generate_instance(4, gpus=1024, jobs=12))


def test_cli_generate_is_deterministic(tmp_path):
    runner = CliRunner()
    for name in ("a.json", "b.json"):
        res = runner.invoke(app, ["generate", str(tmp_path / name), "--seed", "9", "--gpus", "512", "--jobs", "8"])
        assert res.exit_code == 0, res.output
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    inst = api.load_instance(tmp_path / "a.json")
    assert len(inst.jobs) == 8 and sum(n.gpus for n in inst.cluster.nodes) == 512


@pytest.mark.parametrize("seed", range(5))
def test_generated_instances_are_valid_and_follow_the_distributions(seed):
    doc = generate_instance(seed, gpus=2048, jobs=24, max_counts=200)
    inst = api.load_instance(doc)  # schema and cross-field checks
    assert len(inst.event.failed_nodes) == 1
    used = sum(j.current.gpus for j in inst.jobs)
    assert used <= 2048 and all(j.current.gpus % 8 == 0 for j in inst.jobs)
    for j in inst.jobs:
        assert 1 <= len(j.throughput.tflops) <= 200
    assert doc["cost"]["node_mtbf_hours"] == pytest.approx(1000 / 3.79 * 24, abs=0.1)
    assert api.solve(inst).status.solution == "optimal"


def test_curves_are_jagged_good_counts_beat_their_neighbours():
    rng = np.random.default_rng(0)
    kind = MODEL_MIX[1]  # pp = 2: unit 16 GPUs
    table = {int(k): v for k, v in synthetic_curve(rng, kind, 256, 4096).items()}
    for c in range(32, 1000, 16):
        if c + kind.tp in table and c in table:
            assert table[c] > table[c + kind.tp]  # the neighbour above runs worse despite more GPUs


def test_scenario_has_failures_and_no_event():
    sc = generate_scenario(2, gpus=512, jobs=6)
    assert "event" not in sc and "expected_run_seconds" not in sc["cost"]
    assert sc["failures"]["severity_mix"] == {"sev1": 0.37, "sev2": 0.33, "sev3": 0.30}
    assert sc["duration_hours"] == 720.0
    assert dumps(sc) == dumps(generate_scenario(2, gpus=512, jobs=6))


def test_model_curves_use_the_perf_model_or_fail_clearly(tmp_path, monkeypatch):
    args = ["generate", str(tmp_path / "x.json"), "--curves", "model", "--gpus", "512", "--jobs", "4"]
    if importlib.util.find_spec("unicron_plan.perf") is not None:  # the analytical model is there
        assert CliRunner().invoke(app, args).exit_code == 0
        inst = api.load_instance(tmp_path / "x.json")
        assert api.solve(inst).status.solution == "optimal"
        monkeypatch.setitem(__import__("sys").modules, "unicron_plan.perf", None)  # now hide it
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2
    assert "unicron_plan.perf" in res.output


def test_bad_cluster_size_is_bad_input(tmp_path):
    res = CliRunner().invoke(app, ["generate", str(tmp_path / "x.json"), "--gpus", "100"])
    assert res.exit_code == 2 and "--gpus" in res.output


def test_placement_shuffled_by_default_ordered_on_request_only_node_order_differs(tmp_path):
    shuffled = generate_instance(4, gpus=2048, jobs=24, failed_nodes=2)
    ordered = generate_instance(4, gpus=2048, jobs=24, failed_nodes=2, placement="ordered")
    assert dumps(shuffled) == dumps(generate_instance(4, gpus=2048, jobs=24, failed_nodes=2, placement="shuffled"))
    # every draw but the node order is the same: tables, sizes, the event
    assert shuffled["event"] == ordered["event"]
    for a, b in zip(shuffled["jobs"], ordered["jobs"]):
        assert a["throughput"] == b["throughput"] and a["current"]["gpus"] == b["current"]["gpus"]
    # ordered: job k's nodes follow job k-1's; shuffled: some job's nodes are not one run of ids
    runs = [[int(n[1:]) for n in j["current"]["nodes"]] for j in ordered["jobs"] if j["current"]["nodes"]]
    assert all(r == list(range(r[0], r[0] + len(r))) for r in runs)
    assert [r[0] for r in runs] == sorted(r[0] for r in runs)
    spread = [[int(n[1:]) for n in j["current"]["nodes"]] for j in shuffled["jobs"] if j["current"]["nodes"]]
    assert any(r != list(range(r[0], r[0] + len(r))) for r in spread)
    for doc in (shuffled, ordered):
        held = [n for j in doc["jobs"] for n in j["current"]["nodes"]]
        assert len(held) == len(set(held))  # no node given twice
        api.load_instance(doc)  # valid
    res = CliRunner().invoke(app, ["generate", str(tmp_path / "x.json"), "--placement", "sideways"])
    assert res.exit_code == 2
