"""Mixed fleets: jobs that may run on several GPU types, the plan choosing type and count exactly."""

from __future__ import annotations

import copy
import json
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unicron_plan.tools.mixedgen import KINDS, kind_args, large_mixed, mixed_instance
from unicron_plan import load_instance, solve, validate_plan
from unicron_plan.core.problem import build_problem
from unicron_plan.errors import InfeasibleError, InvalidInstanceError
from unicron_plan.solvers import mixed
from conftest import WARM_WAIT


def _outcome(inst, solver):
    try:
        plan = solve(inst, solver=solver)
    except InfeasibleError:
        return None, None
    assert validate_plan(inst, plan).valid
    return plan.objective, plan


def _same(a, b):
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), types=st.integers(2, 3), jobs=st.integers(1, 4),
       constraints=st.booleans())
def test_mixed_dp_agrees_with_brute_force(seed, types, jobs, constraints):
    inst = load_instance(mixed_instance(seed, types=types, jobs=jobs, constraints=constraints))
    best, _ = _outcome(inst, "brute")
    got, plan = _outcome(inst, "dp")
    assert _same(got, best)
    if plan is not None:
        assert plan.status.solution == "optimal" and plan.bound == plan.objective
        for pj in plan.jobs:  # one type per job, its nodes of that type
            kinds = {n.gpu_type for n in inst.cluster.nodes if n.id in pj.nodes}
            assert kinds <= {pj.gpu_type}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), types=st.integers(2, 3), jobs=st.integers(1, 5))
def test_mixed_ip_backends_agree(seed, types, jobs):
    inst = load_instance(mixed_instance(seed, types=types, jobs=jobs, nodes_per_type=3))
    got, _ = _outcome(inst, "dp")
    for solver in ("milp", "cpsat"):
        ref, plan = _outcome(inst, solver)
        assert _same(got, ref), solver
        if plan is not None:
            assert plan.status.solution == "optimal"


def test_single_type_instance_takes_the_single_type_path():
    inst = load_instance("instances/jagged-2048-32jobs.json")
    problem = build_problem(inst)
    assert problem.alternatives == {}
    plan = solve(inst)
    assert plan.objective == inst.reference.objective or math.isclose(plan.objective, inst.reference.objective,
                                                                     rel_tol=1e-9)
    assert all(pj.gpu_type == j.throughput.gpu_type for pj, j in zip(plan.jobs, inst.jobs))


def test_by_type_with_only_the_current_type_means_the_plain_table():
    raw = json.load(open("instances/jagged-128-4jobs.json"))
    plain = solve(load_instance(raw))
    same = copy.deepcopy(raw)
    for job in same["jobs"]:
        tp = job["throughput"]
        tp["by_type"] = {tp["gpu_type"]: tp.pop("tflops")}
    mixed_plan = solve(load_instance(same))
    assert mixed_plan.objective == plain.objective
    assert [(j.gpus, j.nodes) for j in mixed_plan.jobs] == [(j.gpus, j.nodes) for j in plain.jobs]


def test_type_exclusive_jobs_match_the_type_bound_dp():
    """Jobs each allowed one type (some written with by_type) solve exactly as the per-type DP."""
    raw = mixed_instance(7, types=3, jobs=5, exclusive_types=True, nodes_per_type=3)
    got, _ = _outcome(load_instance(raw), "dp")
    ref, _ = _outcome(load_instance(raw), "brute")
    assert _same(got, ref)


def test_h100_failure_moves_a_job_onto_idle_a100s():
    inst = load_instance("instances/mixed-h100-failure-a100-idle.json")
    plan = solve(inst)
    assert plan.status.solution == "optimal" and plan.bound == plan.objective
    assert math.isclose(plan.objective, inst.reference.objective, rel_tol=1e-9)
    hit = next(j for j in plan.jobs if j.hit)
    assert hit.gpu_type == "a100" and hit.action == "restart"
    assert all(n.startswith("a") for n in hit.nodes)
    # the same instance bound to its types is worth less: the move is what type choice earns
    bound_raw = json.loads(inst.model_dump_json(exclude_none=True))
    for job in bound_raw["jobs"]:
        job["throughput"].pop("by_type", None)
    assert solve(load_instance(bound_raw)).objective < plan.objective
    for solver in ("brute", "milp", "cpsat"):
        assert math.isclose(solve(inst, solver=solver).objective, plan.objective, rel_tol=1e-9)


def test_validator_rejects_a_type_the_job_may_not_use_and_nodes_of_another_type():
    inst = load_instance("instances/mixed-h100-failure-a100-idle.json")
    plan = solve(inst)
    data = json.loads(plan.model_dump_json())
    k = next(i for i, j in enumerate(data["jobs"]) if j["gpu_type"] == "a100" and j["hit"])
    data["jobs"][k]["gpu_type"] = "b200"
    report = validate_plan(inst, data)
    assert not report.valid and any("may run on" in p for p in report.problems)
    data["jobs"][k]["gpu_type"] = "h100"  # claims h100 while its nodes are A100s
    report = validate_plan(inst, data)
    assert not report.valid and any("GPU type" in p for p in report.problems)
    del data["jobs"][k]["gpu_type"]  # an entry without gpu_type runs on the current type
    assert not validate_plan(inst, data).valid


def test_validator_keeps_a_leaving_or_pinned_job_on_its_type():
    raw = json.load(open("instances/mixed-h100-failure-a100-idle.json"))
    raw["event"] = {"kind": "job_exit", "jobs": ["llm-a"]}
    raw["jobs"][1]["pinned"] = True  # llm-b, on h100, may also run on a100
    inst = load_instance(raw)
    plan = solve(inst)
    data = json.loads(plan.model_dump_json())
    assert validate_plan(inst, data).valid
    at = {j["id"]: k for k, j in enumerate(data["jobs"])}
    assert data["jobs"][at["llm-a"]]["gpus"] == 0 and data["jobs"][at["llm-a"]]["gpu_type"] == "h100"
    data["jobs"][at["llm-a"]]["gpu_type"] = "a100"
    report = validate_plan(inst, data)
    assert not report.valid and any("llm-a" in p and "job_exit" in p for p in report.problems)
    data["jobs"][at["llm-a"]]["gpu_type"] = "h100"
    data["jobs"][at["llm-b"]].update(gpu_type="a100", gpus=0, placement=[])
    report = validate_plan(inst, data)
    assert not report.valid and any("llm-b" in p and "pinned" in p for p in report.problems)


@pytest.mark.parametrize("patch, field", [
    (lambda j: j["throughput"]["by_type"].update({"tpu": {"8": 1.0}}), "jobs[0].throughput.by_type.tpu"),
    (lambda j: j["throughput"].update({"gpu_type": "a100"}), "jobs[0].current.nodes"),
    (lambda j: j["throughput"].update({"tflops": {"8": 1.0}}), "jobs[0].throughput"),
    (lambda j: j["throughput"].update({"gpu_types": ["h100"]}), "jobs[0].throughput"),
    (lambda j: j["throughput"]["by_type"].update({"a100": {"x": 1.0}}), "jobs[0].throughput.by_type"),
])
def test_bad_mixed_input_names_the_field(patch, field):
    raw = json.load(open("instances/mixed-h100-failure-a100-idle.json"))
    patch(raw["jobs"][0])
    with pytest.raises(InvalidInstanceError) as err:
        solve(load_instance(raw))
    assert err.value.field.startswith(field)


def test_model_named_job_gets_a_table_per_type():
    raw = json.load(open("instances/mixed-h100-failure-a100-idle.json"))
    raw["jobs"][2]["throughput"] = {"gpu_type": "a100", "gpu_types": ["a100", "h100"], "model": "gpt3-1.3b",
                                     "global_batch": 256, "seq_len": 2048}
    inst = load_instance(raw)
    problem = build_problem(inst)
    alts = problem.alternatives[raw["jobs"][2]["id"]]
    assert [a.gpu_type for a in alts] == ["a100", "h100"]
    assert alts[1].table and all(v > 0 for v in alts[1].table.values())
    plan = solve(inst)
    assert plan.status.solution == "optimal"
    entry = next(j for j in plan.jobs if j.id == raw["jobs"][2]["id"])
    assert entry.gpus == 0 or entry.parallelism is not None


def test_time_limit_returns_a_valid_bound():
    inst = load_instance(large_mixed(0, 16384, 4, 128))
    plan = solve(inst, time_limit_seconds=0.05)
    assert validate_plan(inst, plan).valid
    assert plan.bound >= plan.objective
    if plan.status.solution != "optimal":
        assert plan.status.termination == "time_limit" and plan.gap is not None


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS), jobs=st.integers(4, 8),
       gpus=st.sampled_from([256, 512, 1024]))
def test_mixed_agrees_with_highs_on_every_generated_kind(seed, kind, jobs, gpus):
    inst = load_instance(large_mixed(seed, gpus, 4, jobs, counts_per_job=6, **kind_args(kind)))
    plan = solve(inst, solver="dp")
    assert plan.status.solution == "optimal" and plan.bound == plan.objective
    assert validate_plan(inst, plan).valid
    ref = solve(inst, solver="milp")
    assert ref.status.solution == "optimal"
    assert math.isclose(ref.objective, plan.objective, rel_tol=1e-9, abs_tol=1e-6)


def test_stopped_search_keeps_a_valid_bound(monkeypatch):
    """A search cut short (one node, two subgradient steps, no column generation) returns a plan and a
    bound around the optimum."""
    problem = build_problem(load_instance(large_mixed(2, 16384, 4, 128, curves="linear-step")))
    monkeypatch.setattr(mixed, "IP_VARIABLES", 0)  # the branching's own stop, without the hand-over to HiGHS
    _, _, best, proven, stopped, stats = mixed.solve_types(problem)
    assert not stopped and proven == best and stats["lagrange_steps"] > 2
    monkeypatch.setattr(mixed, "MAX_NODES", 1)
    monkeypatch.setattr(mixed, "LAGRANGE_STEPS", 2)
    monkeypatch.setattr(mixed, "COLGEN_STEPS", 0)
    _, _, value, bound, stopped, _ = mixed.solve_types(problem)
    assert stopped and value <= best * (1 + 1e-12) and bound >= best * (1 - 1e-12) and bound > value


def test_large_mixed_exact_and_agrees_with_highs():
    inst = load_instance(large_mixed(2, 1024, 4, 8, counts_per_job=12))
    plan = solve(inst)
    assert plan.status.solution == "optimal"
    ref = solve(inst, solver="milp")
    assert math.isclose(ref.objective, plan.objective, rel_tol=1e-9)


def test_contingency_on_a_mixed_cluster_is_exact(tmp_path):
    from unicron_plan.plan.contingency import build_contingency, write_contingency

    raw = json.load(open("instances/mixed-h100-failure-a100-idle.json"))
    index = build_contingency(load_instance(raw))
    assert set(index["failures"]) == {f"node:{n['id']}" for n in raw["cluster"]["nodes"]}
    write_contingency(index, tmp_path)
    for key, entry in index["failures"].items():
        raw_e = copy.deepcopy(raw)
        raw_e["event"] = {"kind": "failure", "failed_nodes": entry["failed_nodes"]}
        e = load_instance(raw_e)
        fresh = solve(e)
        assert math.isclose(entry["objective"], solve(e, solver="brute").objective, rel_tol=1e-9)
        used = solve(e, contingency=str(tmp_path))
        assert used.solver.name == "contingency", used.solver.options
        assert math.isclose(used.objective, fresh.objective, rel_tol=1e-9)
    moved = index["plans"][index["failures"]["node:h3"]["plan"]]
    assert moved["types"] == {"llm-b": "a100"}


def test_relaxation_of_a_mixed_problem_bounds_every_plan():
    inst = load_instance(mixed_instance(3, types=3, jobs=4))
    problem = build_problem(inst)
    _, bound = mixed.relaxation(problem)
    best, _ = _outcome(inst, "brute")
    assert best is None or bound >= best - 1e-6 * max(1.0, abs(best))


def test_service_plans_and_applies_a_type_move(tmp_path):
    from fastapi.testclient import TestClient

    from unicron_plan.service.app import create_app

    raw = json.load(open("instances/mixed-h100-failure-a100-idle.json"))
    base = copy.deepcopy(raw)
    event = base.pop("event")
    c = TestClient(create_app(tmp_path / "state", contingency=False), base_url="http://127.0.0.1")
    assert c.put("/v1/cluster", json=base).status_code == 200
    plan = c.post("/v1/events", json=event).json()
    assert plan["objective"] == pytest.approx(raw["reference"]["objective"], rel=1e-12)
    moved = next(j for j in plan["jobs"] if j["id"] == "llm-b")
    assert moved["gpu_type"] == "a100"
    assert c.post(f"/v1/plans/{plan['plan_id']}/apply").status_code == 200
    state = c.get("/v1/state").json()["instance"]
    job = next(j for j in state["jobs"] if j["id"] == "llm-b")
    assert job["throughput"]["gpu_type"] == "a100" and job["current"]["nodes"] == moved["nodes"]
    assert job["throughput"]["tflops"] == raw["jobs"][1]["throughput"]["by_type"]["a100"]
    # the next event plans from the moved job: an A100 node failure hits it there
    again = c.post("/v1/events", json={"kind": "failure", "failed_nodes": [moved["nodes"][0]]}).json()
    assert api_valid(again, c)


def api_valid(plan: dict, c) -> bool:
    inst = c.get("/v1/state").json()["instance"]
    return validate_plan(inst, {k: v for k, v in plan.items() if k not in ("plan_id", "revision")}).valid


@pytest.mark.parametrize("seed", range(6))
def test_mixed_contingency_solved_once_per_class_equals_a_solve_of_every_failure(seed):
    from unicron_plan.plan.contingency import build_contingency

    raw = mixed_instance(seed, types=3, jobs=4)
    index = build_contingency(load_instance(raw), racks=True)
    nodes = [n["id"] for n in raw["cluster"]["nodes"]]
    assert {f"node:{n}" for n in nodes} <= set(index["failures"]) | set(index["infeasible"])
    assert index["stats"]["groups"] < len(index["failures"]) + len(index["infeasible"])  # classes were shared
    for key, entry in index["failures"].items():
        raw_e = copy.deepcopy(raw)
        raw_e["event"] = {"kind": "failure", "failed_nodes": entry["failed_nodes"]}
        fresh = solve(load_instance(raw_e), solver="milp")
        assert fresh.status.solution == "optimal"
        assert math.isclose(entry["objective"], fresh.objective, rel_tol=1e-9, abs_tol=1e-6), key


def _with_copies(raw: dict, copies: int, seed: int) -> dict:
    """``raw`` with ``copies`` queued copies of a job that may use several types (interchangeable jobs)."""
    raw = copy.deepcopy(raw)
    src = next((j for j in raw["jobs"] if "by_type" in j["throughput"] and len(j["throughput"]["by_type"]) > 1),
               raw["jobs"][0])
    for k in range(copies):
        job = copy.deepcopy(src)
        job["id"] = f"copy{k}"
        job["current"] = {"gpus": 0, "nodes": []}
        job.pop("pinned", None)
        job["throughput"]["gpu_type"] = sorted(job["throughput"].get("by_type", {job["throughput"]["gpu_type"]: 0}))[
            seed % len(job["throughput"].get("by_type", [0]))]
        raw["jobs"].append(job)
    return raw


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), types=st.integers(2, 3), jobs=st.integers(1, 2), copies=st.integers(2, 3),
       constraints=st.booleans())
def test_interchangeable_jobs_agree_with_brute_force(seed, types, jobs, copies, constraints):
    """The search that orders interchangeable jobs' types still finds the optimum (brute force)."""
    inst = load_instance(_with_copies(mixed_instance(seed, types=types, jobs=jobs, nodes_per_type=2,
                                                     constraints=constraints), copies, seed))
    best, _ = _outcome(inst, "brute")
    got, plan = _outcome(inst, "dp")
    assert _same(got, best)
    if plan is not None:
        assert plan.status.solution == "optimal" and plan.bound == plan.objective


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), types=st.integers(2, 3), copies=st.integers(3, 6))
def test_interchangeable_jobs_agree_with_highs(seed, types, copies):
    inst = load_instance(_with_copies(mixed_instance(seed, types=types, jobs=3, nodes_per_type=4), copies, seed))
    got, _ = _outcome(inst, "dp")
    ref, plan = _outcome(inst, "milp")
    assert _same(got, ref)


def test_interchangeable_jobs_are_found_and_searched_in_order():
    """Queued copies of one job form one chain of interchangeable jobs; jobs that differ in anything the
    count-level problem sees (their current count, a constraint) do not join it."""
    raw = _with_copies(mixed_instance(5, types=2, jobs=2, nodes_per_type=4), 4, 0)
    raw["jobs"][-1]["min_gain_fraction"] = 0.1  # a constraint: no longer interchangeable
    problem = build_problem(load_instance(raw))
    model = mixed._Model(problem)
    ids = [j.id for j in problem.jobs]
    prev = {ids[i]: (ids[p] if p >= 0 else None) for i, p in enumerate(model.sym_prev.tolist())}
    assert prev["copy1"] == "copy0" and prev["copy2"] == "copy1"
    assert prev["copy0"] is None and prev["copy3"] is None
    # the order: once copy0 may only run on its later type (or suspend), copy1 and copy2 may not use the earlier one
    search = mixed._Search(model, None)
    live = [list(ps) for ps in model.pairs_of]
    i0, i1, i2 = ids.index("copy0"), ids.index("copy1"), ids.index("copy2")
    late = max(model.pairs_of[i0], key=lambda p: model.pair_type[p])
    live[i0] = [late]
    out = search._ordered(live)
    low = int(model.pair_type[late])
    assert all(int(model.pair_type[p]) >= low for p in out[i1] + out[i2])
    live = [list(ps) for ps in model.pairs_of]
    live[i0] = []  # copy0 suspends: so do the copies after it
    out = search._ordered(live)
    assert out[i1] == [] and out[i2] == []


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), types=st.integers(2, 3), jobs=st.integers(2, 4), copies=st.integers(0, 2))
def test_branch_and_bound_alone_agrees_with_brute_force(seed, types, jobs, copies):
    """With the hand-over to HiGHS off (rule 8), the search's own branching proves the same optimum."""
    raw = mixed_instance(seed, types=types, jobs=jobs, nodes_per_type=2)
    inst = load_instance(_with_copies(raw, copies, seed) if copies else raw)
    best, _ = _outcome(inst, "brute")
    old = mixed.IP_VARIABLES
    mixed.IP_VARIABLES = 0
    try:
        got, plan = _outcome(inst, "dp")
    finally:
        mixed.IP_VARIABLES = old
    assert _same(got, best)
    if plan is not None:
        assert plan.status.solution == "optimal" and plan.bound == plan.objective
        assert (plan.solver.options or {}).get("ip_runs", 0) == 0


def test_grouped_integer_program_closes_a_simulator_repair():
    """A repair in the 16,384-GPU H100/A100 simulation: 40 jobs in 12 groups of interchangeable jobs,
    whose root leaves a gap the branching needed over a hundred nodes to close; the grouped integer
    program of the types left closes it at the root, with the same optimum as HiGHS on the full model."""
    from pathlib import Path

    inst = load_instance(json.loads((Path(__file__).parent / "data" / "mixed-repair-16384-h100-a100.json").read_text()))
    plan = solve(inst, solver="dp")
    assert plan.status.solution == "optimal" and plan.bound == plan.objective
    assert plan.solver.options["nodes"] == 1 and plan.solver.options["ip_runs"] == 1
    ref = solve(inst, solver="milp")
    assert ref.status.solution == "optimal"
    assert math.isclose(ref.objective, plan.objective, rel_tol=1e-9)


def _after_h3_applied() -> dict:
    """The mixed library cluster after the failure of H100 node h3 and its optimal plan were applied:
    h3 down as a whole, llm-b moved to the A100s (what a coordinator holds after the first apply)."""
    raw = json.load(open("instances/mixed-h100-failure-a100-idle.json"))
    plan = solve(load_instance(raw))
    base = copy.deepcopy(raw)
    base.pop("event")
    base.pop("reference")
    for node in base["cluster"]["nodes"]:
        if node["id"] == "h3":
            node["failed_gpus"] = list(range(node["gpus"]))
    planned = {j.id: j for j in plan.jobs}
    for job in base["jobs"]:
        pj = planned[job["id"]]
        job["current"] = {"gpus": pj.gpus, "nodes": list(pj.nodes)}
        if pj.gpu_type != job["throughput"]["gpu_type"]:
            job["throughput"] = {"gpu_type": pj.gpu_type, "by_type": job["throughput"]["by_type"]}
    return base


def test_mixed_contingency_leaves_out_a_node_already_down():
    # A node down as a whole cannot fail again (that event is bad input): the index has no key for it
    # (nor for its rack), instead of the whole build failing on it; every other failure is exact.
    from unicron_plan.plan.contingency import build_contingency

    base = _after_h3_applied()
    index = build_contingency(load_instance(base), racks=True)
    assert set(index["failures"]) | set(index["infeasible"]) == {
        "node:h0", "node:h1", "node:h2", "node:a0", "node:a1", "node:a2", "node:a3", "rack:rack-a"}
    for key, entry in index["failures"].items():
        raw_e = dict(base, event={"kind": "failure", "failed_nodes": entry["failed_nodes"]})
        fresh = solve(load_instance(raw_e), solver="brute")
        assert math.isclose(entry["objective"], fresh.objective, rel_tol=1e-9), key
        used = solve(load_instance(raw_e), contingency=index)
        assert used.solver.name == "contingency", (key, used.solver.options)


def test_service_keeps_warm_contingency_after_a_node_failure_is_applied(tmp_path):
    # After the first applied failure of a whole node, the coordinator's warm contingency is built for
    # the new cluster (it was "off": the build failed on the down node) and answers the next failure.
    from unicron_plan.service.coordinator import Coordinator

    raw = json.load(open("instances/mixed-h100-failure-a100-idle.json"))
    base = copy.deepcopy(raw)
    event = base.pop("event")
    base.pop("reference")
    coord = Coordinator(tmp_path / "s")
    try:
        coord.put_cluster(base)
        assert coord.wait_contingency(WARM_WAIT)
        plan = coord.post_event(event)
        coord.apply(plan["plan_id"])
        assert coord.precomputed_status()["total"] == 7  # before and after the worker reports: not the down h3
        assert coord.wait_contingency(WARM_WAIT), coord.contingency_status()
        deadline = time.monotonic() + 120
        while coord.precomputed_status()["done"] < 7 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert coord.precomputed_status() == {"done": 7, "total": 7}  # every node but the down h3
        ev = {"kind": "failure", "failed_nodes": ["a2"]}
        served = coord.post_event(ev, dry_run=True)
        assert served["solver"]["name"] == "contingency"
        fresh = solve(dict(_after_h3_applied(), event=ev))
        assert served["objective"] == pytest.approx(fresh.objective, rel=1e-12)
    finally:
        coord.close()


@pytest.mark.parametrize("throughput,field", [
    ({"gpu_type": "h100", "by_type": {"h100": {"8": 3000.0}, "v100": {"8": 900.0}}}, "job.throughput.by_type.v100"),
    ({"gpu_type": "v100", "tflops": {"8": 1.0}}, "job.throughput.gpu_type"),
    ({"gpu_type": "b200", "by_type": {"h100": {"8": 3000.0}}}, "job.throughput"),
    ({"gpu_type": "h100", "model": "gpt3-13b", "global_batch": 1024, "seq_len": 2048,
      "gpu_types": ["h100", "b200"]}, "job.throughput.gpu_types"),
])
def test_service_new_job_errors_name_the_bodys_field(tmp_path, throughput, field):
    # A queued job's bad GPU types are reported as the request body's fields (``job.``), whichever
    # check finds them, never as the cluster's ``jobs[N]``.
    from fastapi.testclient import TestClient

    from unicron_plan.service.app import create_app

    base = json.load(open("instances/mixed-h100-failure-a100-idle.json"))
    base.pop("event")
    c = TestClient(create_app(tmp_path / "state", contingency=False), base_url="http://127.0.0.1")
    assert c.put("/v1/cluster", json=base).status_code == 200
    job = {"id": "q", "weight": 1.0, "throughput": throughput, "current": {"gpus": 0, "nodes": []}}
    r = c.post("/v1/jobs", json=job)
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith(field + ":"), r.json()


@pytest.mark.parametrize("patch, line", [
    (lambda j: j["throughput"]["by_type"].update({"a100": {}}),
     "error: jobs[0].throughput.by_type.a100: the table is empty: give at least one GPU count"),
    (lambda j: j["throughput"].update({"tflops": {}}),
     "error: jobs[0].throughput.tflops: the table is empty: give at least one GPU count"),
    (lambda j: j.update(throughput={"gpu_type": "h100", "model": "gpt3-13b", "global_batch": 1024, "seq_len": 2048,
                                    "gpu_types": ["h100", "a100", "h100"]}),
     "error: jobs[0].throughput.gpu_types[2]: 'h100' is listed twice"),
    (lambda j: j["throughput"]["by_type"].update({"v100": {"16": 1.0}}),
     "error: jobs[0].throughput.by_type.v100: 'v100' is not in cluster.gpu_types (a100, h100)"),
    (lambda j: j["throughput"].update({"gpu_type": "a100"}),
     "error: jobs[0].current.nodes[0]: node 'h0' has GPU type 'h100', the job runs on 'a100'"),
    (lambda j: j["throughput"].update({"compact": {"counts": [16], "tflops": [5800.0]}}),
     "error: jobs[0].throughput: 'by_type' (tables per GPU type, each in the 'tflops' form) goes without 'compact'"),
])
def test_cli_bad_mixed_input_is_one_line_naming_the_field(tmp_path, patch, line):
    # Exit 2 and exactly this line: an empty table says so (not "key ''"), a list index joins its field.
    from typer.testing import CliRunner

    from unicron_plan.cli import app

    raw = json.load(open("instances/mixed-h100-failure-a100-idle.json"))
    patch(raw["jobs"][0])
    path = tmp_path / "in.json"
    path.write_text(json.dumps(raw))
    res = CliRunner().invoke(app, ["solve", str(path)])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip() == line


def test_summary_shows_each_jobs_gpu_type_on_a_mixed_fleet_only():
    from unicron_plan.plan.report import summary_table

    table = summary_table(solve(load_instance("instances/mixed-h100-failure-a100-idle.json")))
    cols = {c.header: list(c._cells) for c in table.columns}
    assert dict(zip(cols["job"], cols["GPU type"])) == {"llm-a": "h100", "llm-b": "a100", "llm-c": "a100"}
    single = summary_table(solve(load_instance("instances/tiny-one-job-two-nodes.json")))
    assert "GPU type" not in [c.header for c in single.columns]


def test_instances_readme_says_which_node_fails_and_how_many_jobs_change_type():
    # The library table's mixed rows: "<type> node ... fails" names the failed node's type and
    # "<n> jobs change type" the jobs the optimal plan runs on another type than their current one.
    import re
    from pathlib import Path

    numbers = {w: k for k, w in enumerate("zero one two three four five six seven eight nine ten".split())}
    text = Path("instances/README.md").read_text()
    checked = 0
    for m in re.finditer(r"^\| (mixed-[a-z0-9-]+) \|(.*)$", text, re.M):
        raw = json.load(open(f"instances/{m.group(1)}.json"))
        row = m.group(2)
        kinds = {n["id"]: n["gpu_type"] for n in raw["cluster"]["nodes"]}
        said = re.search(r"\b([a-z0-9]+) node (?:[a-z0-9-]+ )?fails", row)
        if said and "event" in raw:
            assert {kinds[n] for n in raw["event"]["failed_nodes"]} == {said.group(1)}, m.group(1)
            checked += 1
        moved = re.search(r"\b(\w+) jobs? changes? type", row)
        if moved:
            plan = solve(load_instance(raw))
            now = {j["id"]: j["throughput"]["gpu_type"] for j in raw["jobs"]}
            assert sum(j.gpu_type != now[j.id] for j in plan.jobs) == numbers[moved.group(1)], m.group(1)
            checked += 1
    assert checked >= 4


@pytest.mark.parametrize("change, field", [
    (lambda plan: plan["types"].update({"llm-b": 5}), "types.llm-b"),
    (lambda plan: plan.update(types=["a100"]), "types"),
    (lambda plan: plan["counts"].update({"llm-a": 1.5}), "counts.llm-a"),
])
def test_malformed_types_in_a_mixed_index_name_the_file_and_field(tmp_path, change, field):
    from typer.testing import CliRunner

    from unicron_plan.cli import app
    from unicron_plan.plan.contingency import build_contingency, write_contingency

    path = "instances/mixed-h100-failure-a100-idle.json"
    index = build_contingency(load_instance(path))
    key = index["failures"]["node:h3"]["plan"]
    assert index["plans"][key]["types"] == {"llm-b": "a100"}
    change(index["plans"][key])
    written = write_contingency(index, tmp_path)
    res = CliRunner().invoke(app, ["solve", path, "--contingency", str(tmp_path)])
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr.startswith(f"error: {written}: plans.{key}.{field}: "), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
