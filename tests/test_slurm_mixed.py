"""Mixed fleets on Slurm, on documents captured from the testbed (n1-n8 gpu:h100:8, n9-n12
gpu:a100:8; examples/slurm/mixed/): a job's GPU types from its comment (``gpu-types=``, a strict
list), a table per type (``throughput.TYPE=``), the node's type from its gres; a plan that moves a
job to another type is carried out by its node list alone, every word quoted."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from test_slurm_formats import _run_with_fakes
from unicron_plan import api
from unicron_plan.errors import InvalidInstanceError
from unicron_plan.integrations.common import Cost, GpuMap
from unicron_plan.integrations.slurm import export_slurm, import_slurm, render_script

MIXED = Path(__file__).resolve().parents[1] / "examples" / "slurm" / "mixed"
COST = Cost(expected_run_seconds=36000)


def load() -> tuple[dict, dict]:
    return (json.loads((MIXED / "sinfo-22.05.json").read_text()),
            json.loads((MIXED / "squeue-22.05.json").read_text()))


def imported(nodes=None, jobs=None) -> dict:
    n, j = load()
    return import_slurm(nodes or n, jobs or j, cost=COST, gpu_map=GpuMap(), rack_feature="rack")


def job(jobs: dict, job_id: int) -> dict:
    return next(j for j in jobs["jobs"] if j["job_id"] == job_id)


def test_capture_reads_types_from_gres_and_comments():
    """37: gpu:h100:8 requested (H100 only) on n1-n6; 38: untyped GPUs, constraint [h100|a100],
    gpu-types=h100,a100, requeued by Slurm when its node n7 went down (pending, BeginTime, planned);
    39: held by its owner, gpu-types=a100,h100 (left out); 40: unplanned, 4 GPUs of n8 withheld."""
    inst = imported()
    types = {n["id"]: n["gpu_type"] for n in inst["cluster"]["nodes"]}
    assert {types[f"n{i}"] for i in range(1, 9)} == {"h100"} and {types[f"n{i}"] for i in range(9, 13)} == {"a100"}
    jobs = {j["id"]: j for j in inst["jobs"]}
    assert jobs["37"]["throughput"]["gpu_type"] == "h100" and "by_type" not in jobs["37"]["throughput"]
    assert jobs["38"]["throughput"] == {"gpu_type": "h100", "by_type": {
        "h100": {"8": 100.0, "16": 195.0}, "a100": {"8": 35.0, "16": 68.0, "24": 100.0, "32": 130.0}}}
    assert "39" not in jobs                                    # its owner's hold is not the planner's to lift
    held = job(load()[1], 39)
    held["state_description"] = "job requeued in held state"   # the planner's own hold: planned
    jobs = {j["id"]: j for j in imported(jobs={**load()[1], "jobs": [held if j["job_id"] == 39 else j
                                                                      for j in load()[1]["jobs"]]})["jobs"]}
    assert jobs["39"]["throughput"]["gpu_type"] == "a100"     # queued: the first type it lists
    assert jobs["38"]["tp"] == 8 and inst["event"]["failed_nodes"] == ["n7"]
    assert api.load_instance(inst)


def test_plan_moves_the_requeued_job_onto_a100_by_its_node_list(tmp_path):
    nodes, jobs = load()
    plan = api.solve(imported())
    assert plan.status.termination == "optimal"
    entry = {pj.id: pj for pj in plan.jobs}
    assert (entry["38"].gpu_type, entry["38"].gpus, entry["38"].nodes) == ("a100", 32, ["n9", "n10", "n11", "n12"])
    assert entry["37"].action == "keep"
    steps = export_slurm(plan, jobs, nodes)
    calls = _run_with_fakes(render_script(steps), tmp_path)
    assert ["scontrol", "update", "JobId=38", "NumNodes=4-4", "NumTasks=4", "NumCPUs=4", "ReqNodeList=n[9-12]"] in calls
    assert not any(a.startswith(("TresPerNode", "Gres")) for c in calls for a in c)


def _comment(jobs: dict, job_id: int, comment: str, untyped: bool = False) -> dict:
    out = copy.deepcopy(jobs)
    job(out, job_id)["comment"] = comment
    if untyped:
        job(out, job_id)["tres_per_node"] = "gres:gpu:8"
    return out


@pytest.mark.parametrize("comment, field, message", [
    ("unicron-plan: weight=1 gpu-types=h100;a100 throughput=8:1", "gpu-types", "comma-separated"),
    ("unicron-plan: weight=1 gpu-types=h100,,a100 throughput=8:1", "gpu-types", "comma-separated"),
    ("unicron-plan: weight=1 gpu-types=h100,h100 throughput.h100=8:1", "gpu-types", "twice"),
    ("unicron-plan: weight=1 'gpu-types=h100\n' throughput=8:1", "gpu-types", "comma-separated"),
    ("unicron-plan: weight=1 gpu-types=" + ",".join(f"t{i}" for i in range(17)) + " throughput=8:1",
     "gpu-types", "at most 16"),
    ("unicron-plan: weight=1 gpu-types=h100,v100 throughput=8:1", "gpu-types", "unknown GPU product 'v100'"),
    ("unicron-plan: weight=1 gpu-types=h100,a100 throughput=8:100,16:195", "throughput", "throughput.TYPE"),
    ("unicron-plan: weight=1 gpu-types=h100,a100 throughput.h100=8:100", "throughput.a100", "missing"),
    ("unicron-plan: weight=1 gpu-types=h100 throughput.h100=8:100 throughput.a100=8:1", "throughput.a100",
     "not a GPU type the job may run on"),
    ("unicron-plan: weight=1 gpu-types=a100 throughput.a100=8:1", "gpu-types", "runs on h100"),
])
def test_bad_type_comments_name_the_job_and_field(comment, field, message):
    """On job 37 (running on n1-n6) with its request made untyped."""
    nodes, jobs = load()
    jobs = _comment(jobs, 37, comment, untyped=True)
    with pytest.raises(InvalidInstanceError) as err:
        imported(nodes, jobs)
    assert err.value.field.startswith("Job 37") and field in err.value.field, err.value
    assert message in err.value.message, err.value.message


def test_a_typed_request_cannot_change_type():
    """Slurm 22.05 leaves a pending job whose gres type was updated never runnable (BadConstraints,
    seen on the testbed), so a typed request with other types in the comment is refused at import,
    and an export that would move a typed job to another type is refused."""
    nodes, jobs = load()
    bad = _comment(jobs, 37, "unicron-plan: weight=2 gpu-types=h100,a100 throughput.h100=8:100 throughput.a100=8:35")
    with pytest.raises(InvalidInstanceError, match=r"--gres=gpu:8.*--constraint='\[h100\|a100\]'") as err:
        imported(nodes, bad)
    assert err.value.field == "Job 37 tres_per_node"
    plan = api.solve(imported())
    moved = json.loads(plan.model_dump_json())
    for pj in moved["jobs"]:
        if pj["id"] == "38":
            pj["id"] = "37"        # job 37 (gpu:h100:8) placed on the A100 nodes
        elif pj["id"] == "37":
            pj["id"] = "38"
    with pytest.raises(InvalidInstanceError, match="does not change the GPU type"):
        export_slurm(api.load_plan(moved), jobs, nodes)


def test_export_checks_the_planned_nodes_type():
    nodes, jobs = load()
    plan = json.loads(api.solve(imported()).model_dump_json())
    entry = next(pj for pj in plan["jobs"] if pj["id"] == "38")
    entry["gpu_type"] = "h100"                                  # says H100, places on A100 nodes
    with pytest.raises(InvalidInstanceError, match="node n9 has a100 GPUs"):
        export_slurm(api.load_plan(plan), jobs, nodes)


def test_one_node_size_per_job_across_its_types():
    nodes, jobs = load()
    for n in nodes["nodes"]:
        if n["name"] in ("n9", "n10", "n11", "n12"):
            n["gres"] = "gpu:a100:4"
    with pytest.raises(InvalidInstanceError, match="one node size"):
        imported(nodes, jobs)
