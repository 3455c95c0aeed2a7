"""Write the scenario library (run from the repository root: ``python scenarios/build.py``).

Throughput tables follow one simple rule (an ASSUMPTION of this library, not
the package's performance model):

- GPT-3 sizes (Brown et al. 2020): 1.3B, 2.7B, 6.7B, 13B, 175B parameters P.
- Smallest GPU count n_min: the smallest power of two with 16 bytes/parameter
  (bf16 weights and gradients + fp32 Adam states) within 75% of 80 GiB.
  -> 1, 1, 2, 4, 64 GPUs.
- Allowed counts: n = n_min x d for data-parallel degrees d = 1 .. d_max (at most the
  job's cap); on the 1,024- and 16,384-GPU clusters only multiples of 8 (whole nodes).
- Aggregate TFLOP/s: T(n) = n x 312 x 0.45 / (1 + 0.01 (d - 1)). 0.45 of peak
  is Megatron-LM's measured 44-47% (Narayanan et al., Table 1,
  docs/data/megatron_table1.csv); the 1% loss per extra replica stands for
  strong scaling at a fixed global batch (smaller per-replica batches, more
  all-reduce), so small models spread thin lose efficiency.

D_trans: each job's ``transition_seconds`` is derived by the package's transition model
(``unicron_plan.perf.transition``, docs/perf.md) for its model at its time-0 count (61-65 s
here); the instance that seeds the time-0 plan keeps a 600 s default, which does not matter
there (every job starts from 0 GPUs, so no transition is charged).

The ``-perf`` scenarios take their tables from the package's performance model instead
(``unicron_plan.perf``, docs/perf.md): A800 GPUs, GPT-3's batch sizes (Brown et al.
2020, Table 2.1) in sequences of 2,048 tokens; the allowed counts are those up to the
job's cap where the model finds a layout Megatron-LM accepts that fits in memory (48, 56
and 64 GPUs for 175B on up to 64 GPUs, where the rule above allows only 64), and the
TFLOP/s the model's achieved model TFLOP/s at the best layout of each count. There the
175B job weighs 1.5 (at 1.2 the healthy optimum leaves it without GPUs).

Failures: node MTBF from Llama 3's 3.79 interruptions per 1000 node-days
(6332 h), SEV1 repair lognormal with median 12 h and sigma 1 ("hours to a
day"), severity mix from Unicron's Figure 1 (unicron_plan.faults.severity). The
time-0 allocation of every scenario is the planner's optimum for the healthy
cluster, so that every policy starts from the same place.

The ``-h100-a100`` scenarios are mixed fleets: the first half of the nodes H100, the second A100
(racks of one type), the same GPT-3 mixes on whole nodes, every job allowed both types with one
table per type from the performance model (as the ``-perf`` scenarios, on H100 and A100), its time-0
type and count the planner's optimum over types (``mixed_scenario``).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from unicron_plan import api  # noqa: E402
from unicron_plan.faults import faultdata
from unicron_plan.io import dumps, write_atomic  # noqa: E402
from unicron_plan.faults.severity import figure1_severity_mix  # noqa: E402

A800 = {"peak_tflops": 312.0, "memory_gib": 80.0, "intra_node_gbps": 400.0, "inter_node_gbps": 25.0}
PARAMS_B = {"gpt3-1.3b": 1.3, "gpt3-2.7b": 2.7, "gpt3-6.7b": 6.7, "gpt3-13b": 13.0, "gpt3-175b": 175.0}
# Job weights (priorities): the small jobs weigh more per TFLOP, as experiments next to a flagship run.
W = {"gpt3-175b": 1.0, "gpt3-13b": 1.2, "gpt3-6.7b": 1.2, "gpt3-2.7b": 1.5, "gpt3-1.3b": 1.5}
MFU = 0.45
# Mixed fleets: a switch (2 racks of 16 nodes, 256 GPUs of one type) fails as a unit once per 1,000 h
# (ASSUMPTION, not a published figure: the correlated failure where a job's GPU type matters).
SWITCH_MTBF_HOURS = 1000.0
LOSS_PER_REPLICA = 0.01


def n_min(params_b: float, memory_gib: float = 80.0) -> int:
    """Smallest power-of-two GPU count holding 16 bytes per parameter in 75% of HBM."""
    need = 16 * params_b * 1e9 / (0.75 * memory_gib * 2**30)
    return 1 << max(0, math.ceil(math.log2(need))) if need > 1 else 1


def table(model: str, max_gpus: int, max_degree: int = 64, whole_nodes: bool = False) -> dict[str, float]:
    """{count: aggregate TFLOP/s} by the rule of the module docstring; ``whole_nodes`` keeps only
    multiples of 8 GPUs (jobs take whole nodes, as on large clusters)."""
    base = n_min(PARAMS_B[model])
    out = {}
    for d in range(1, 100_000):
        n = base * d
        if n > max_gpus or d > max_degree:
            break
        if whole_nodes and n % 8:
            continue
        out[str(n)] = round(n * A800["peak_tflops"] * MFU / (1 + LOSS_PER_REPLICA * (d - 1)), 3)
    return out


# GPT-3's batch sizes in sequences of 2,048 tokens (Brown et al. 2020, Table 2.1: 1M, 1M, 2M, 2M, 3.2M tokens).
GLOBAL_BATCH = {"gpt3-1.3b": 512, "gpt3-2.7b": 512, "gpt3-6.7b": 1024, "gpt3-13b": 1024, "gpt3-175b": 1536}
SEQ_LEN = 2048


def perf_table(model: str, max_gpus: int, whole_nodes: bool = False, gpu_type: str = "a800") -> dict[str, float]:
    """{count: aggregate TFLOP/s} from the performance model (module docstring)."""
    from unicron_plan.perf import derive_table

    curve = derive_table(model, gpu_type, GLOBAL_BATCH[model], SEQ_LEN, max_gpus=max_gpus)
    return {str(n): round(t, 3) for n, t in sorted(curve.tflops_table().items()) if not (whole_nodes and n % 8)}


def derived_d_trans(model: str, gpus: int, gpu_type: str = "a800") -> float:
    """D_trans of a job of ``model`` holding ``gpus`` GPUs from the package's transition model
    (``unicron_plan.perf.transition``, docs/perf.md): a restart at its layout with each GPU's state
    loaded from the nearest copy, plus set-up; at the largest count up to ``gpus`` where the
    performance model finds a Megatron-LM layout (the library's tables are not the model's)."""
    from unicron_plan.core.cost import derived_transition_seconds
    from unicron_plan.perf import derive_table

    curve = derive_table(model, gpu_type, GLOBAL_BATCH[model], SEQ_LEN, max_gpus=max(gpus, 1))
    n = max(c for c in curve.tflops_table() if c <= max(gpus, 1))
    return round(derived_transition_seconds(model, gpu_type, GLOBAL_BATCH[model], SEQ_LEN, "full", n), 1)


def scenario(name: str, description: str, nodes: int, jobs: list[tuple[str, str, float, int]],
             whole_nodes: bool = False, perf: bool = False) -> dict:
    """A scenario with ``nodes`` x 8 A800 in racks of 16 nodes; jobs (id, model, weight, max GPUs)."""
    cluster = {"gpu_types": {"a800": A800},
               "nodes": [{"id": f"n{k:04d}", "gpu_type": "a800", "gpus": 8, "rack": f"r{k // 16:03d}"}
                         for k in range(nodes)]}
    job_list = [{"id": jid, "weight": w, "throughput": {"gpu_type": "a800", "tflops": perf_table(model, cap, whole_nodes) if perf else table(model, cap, 256, whole_nodes)},
                 "current": {"gpus": 0, "nodes": []}} for jid, model, w, cap in jobs]
    for job, pj, (_, model, _, _) in zip(job_list, at_time_zero(name, cluster, job_list), jobs):
        smallest = min(int(c) for c in job["throughput"]["tflops"])
        job["transition_seconds"] = derived_d_trans(model, pj.gpus or smallest)
    return with_failures(name, description, cluster, job_list)


def at_time_zero(name: str, cluster: dict, job_list: list[dict]) -> list:
    """Time 0: the planner's optimum for the healthy cluster; each job's ``current`` is set from it.
    Returns the plan's jobs, in ``job_list``'s order."""
    inst = {"schema_version": "1", "name": name, "cluster": cluster, "jobs": job_list,
            "cost": {"node_mtbf_hours": round(faultdata.LLAMA3_NODE_MTBF_HOURS, 1),
                     "default_transition_seconds": 600.0}}
    plan = api.solve(inst)
    for job, pj in zip(job_list, plan.jobs):
        job["current"] = {"gpus": pj.gpus, "nodes": pj.nodes}
    return plan.jobs


def with_failures(name: str, description: str, cluster: dict, job_list: list[dict]) -> dict:
    """The scenario of ``cluster`` and ``job_list``: 30 days at the Llama 3 failure rate (module docstring)."""
    mix = {k: round(v, 4) for k, v in figure1_severity_mix().items()}
    mix["sev3"] = round(1.0 - mix["sev1"] - mix["sev2"], 4)
    return {"schema_version": "1", "name": name, "description": description, "cluster": cluster,
            "jobs": job_list, "cost": {}, "duration_hours": 720.0,
            "failures": {"node_mtbf_hours": round(faultdata.LLAMA3_NODE_MTBF_HOURS, 1),
                         "repair_hours": {"median": faultdata.REPAIR_MEDIAN_HOURS,
                                          "sigma": faultdata.REPAIR_SIGMA},
                         "severity_mix": mix}}


def mixed_scenario(name: str, description: str, nodes: int, jobs: list[tuple[str, str, float, int]],
                   types: tuple[str, str] = ("h100", "a100")) -> dict:
    """A mixed fleet: ``nodes`` x 8 GPUs, the first half of ``types[0]``, the second of ``types[1]``, in
    racks of 16 nodes of one type; jobs (id, model, weight, max GPUs) may run on both types, on whole
    nodes, with one table per type from the performance model (``throughput.by_type``). Time 0 is the
    planner's optimum over types and counts for the healthy cluster."""
    from unicron_plan.integrations.common import gpu_type_entry

    half = nodes // 2
    cluster = {"gpu_types": {t: gpu_type_entry(t) for t in types},
               "nodes": [{"id": f"n{k:04d}", "gpu_type": types[0] if k < half else types[1], "gpus": 8,
                          "rack": f"r{k // 16:03d}"} for k in range(nodes)]}
    job_list = [{"id": jid, "weight": w,
                 "throughput": {"gpu_type": types[0], "by_type": {t: perf_table(model, cap, True, t) for t in types}},
                 "current": {"gpus": 0, "nodes": []}} for jid, model, w, cap in jobs]
    for job, pj, (_, model, _, _) in zip(job_list, at_time_zero(name, cluster, job_list), jobs):
        job["throughput"]["gpu_type"] = pj.gpu_type
        smallest = min(int(c) for c in job["throughput"]["by_type"][pj.gpu_type])
        job["transition_seconds"] = derived_d_trans(model, pj.gpus or smallest, pj.gpu_type)
    return with_failures(name, description, cluster, job_list)


def library() -> dict[str, dict]:
    """The library's scenarios by file stem."""
    small = [("gpt3-175b", "gpt3-175b", 1.2, 64), ("gpt3-13b", "gpt3-13b", W["gpt3-13b"], 64),
             ("gpt3-6.7b", "gpt3-6.7b", W["gpt3-6.7b"], 64), ("gpt3-2.7b", "gpt3-2.7b", W["gpt3-2.7b"], 32),
             ("gpt3-1.3b", "gpt3-1.3b", W["gpt3-1.3b"], 32)]
    mid = ([(f"gpt3-175b-{i}", "gpt3-175b", W["gpt3-175b"], 512) for i in range(2)]
           + [(f"gpt3-13b-{i}", "gpt3-13b", W["gpt3-13b"], 256) for i in range(2)]
           + [(f"gpt3-6.7b-{i}", "gpt3-6.7b", W["gpt3-6.7b"], 128) for i in range(2)]
           + [("gpt3-2.7b", "gpt3-2.7b", W["gpt3-2.7b"], 64), ("gpt3-1.3b", "gpt3-1.3b", W["gpt3-1.3b"], 64)])
    big = ([(f"gpt3-175b-{i:02d}", "gpt3-175b", W["gpt3-175b"], 1024) for i in range(16)]
           + [(f"gpt3-13b-{i}", "gpt3-13b", W["gpt3-13b"], 256) for i in range(8)]
           + [(f"gpt3-6.7b-{i}", "gpt3-6.7b", W["gpt3-6.7b"], 128) for i in range(8)]
           + [(f"gpt3-2.7b-{i}", "gpt3-2.7b", W["gpt3-2.7b"], 64) for i in range(4)]
           + [(f"gpt3-1.3b-{i}", "gpt3-1.3b", W["gpt3-1.3b"], 64) for i in range(4)])
    huge = ([(f"gpt3-175b-{i:03d}", "gpt3-175b", W["gpt3-175b"], 1024) for i in range(128)]
            + [(f"gpt3-13b-{i:02d}", "gpt3-13b", W["gpt3-13b"], 256) for i in range(64)]
            + [(f"gpt3-6.7b-{i:02d}", "gpt3-6.7b", W["gpt3-6.7b"], 128) for i in range(64)]
            + [(f"gpt3-2.7b-{i:02d}", "gpt3-2.7b", W["gpt3-2.7b"], 64) for i in range(32)]
            + [(f"gpt3-1.3b-{i:02d}", "gpt3-1.3b", W["gpt3-1.3b"], 64) for i in range(32)])
    dense = scenario("gpt3-mix-128-a800-dense", "As gpt3-mix-128-a800, with the dense failure injection of "
                     "fault-tolerance papers: one failure every 3 h on the cluster, 30 days.", 16, small)
    del dense["failures"]["node_mtbf_hours"]
    dense["failures"]["failure_every_hours"] = 3.0
    small_perf = [("gpt3-175b", "gpt3-175b", 1.5, 64)] + small[1:]
    perf = scenario("gpt3-mix-128-a800-perf", "As gpt3-mix-128-a800 with throughput tables and allowed counts "
                    "from the performance model (175B on 48, 56 or 64 GPUs).", 16, small_perf, perf=True)
    perf_dense = scenario("gpt3-mix-128-a800-perf-dense", "As gpt3-mix-128-a800-perf, with one failure every "
                          "3 h on the cluster.", 16, small_perf, perf=True)
    del perf_dense["failures"]["node_mtbf_hours"]
    perf_dense["failures"]["failure_every_hours"] = 3.0
    mixed_1024 = mixed_scenario(
        "gpt3-mix-1024-h100-a100", "1,024 GPUs, half H100 (64 x 8) half A100 (64 x 8), the 1,024-GPU GPT-3 mix on "
        "whole nodes, every job allowed both types (tables per type from the performance model), Llama 3 node "
        "failure rate plus switch failures (2 racks, 256 GPUs of one type, MTBF 1,000 h per switch), 30 days.",
        128, mid)
    mixed_1024["failures"]["domains"] = [{"kind": "switch", "racks_per_switch": 2, "mtbf_hours": SWITCH_MTBF_HOURS}]
    return {
        "gpt3-mix-1024-h100-a100": mixed_1024,
        "gpt3-mix-16384-h100-a100": mixed_scenario(
            "gpt3-mix-16384-h100-a100", "16,384 GPUs, half H100 (1,024 x 8) half A100 (1,024 x 8), the "
            "16,384-GPU GPT-3 mix on whole nodes, every job allowed both types (tables per type from the "
            "performance model), Llama 3 node failure rate, 30 days.", 2048, big),
        "gpt3-mix-128-a800-perf": perf,
        "gpt3-mix-128-a800-perf-dense": perf_dense,
        "gpt3-mix-128-a800-dense": dense,
        "gpt3-mix-128-a800": scenario(
            "gpt3-mix-128-a800", "Unicron's setting: 128 A800 (16 x 8), GPT-3 1.3B-175B, Llama 3 failure rate, 30 days.",
            16, small),
        "gpt3-mix-1024-a800": scenario(
            "gpt3-mix-1024-a800", "1,024 A800 (128 x 8), 8 GPT-3 jobs on whole nodes, Llama 3 failure rate, 30 days.", 128, mid,
            whole_nodes=True),
        "gpt3-mix-16384-a800": scenario(
            "gpt3-mix-16384-a800", "16,384 A800 (2,048 x 8, Llama 3 scale), 40 GPT-3 jobs on whole nodes, Llama 3 failure rate, "
            "30 days.", 2048, big, whole_nodes=True),
        "gpt3-mix-131072-a800": scenario(
            "gpt3-mix-131072-a800", "131,072 A800 (16,384 x 8), the 16,384-GPU mix eight times (320 GPT-3 jobs on "
            "whole nodes), Llama 3 failure rate, 30 days.", 16384, huge, whole_nodes=True),
    }


def main() -> None:
    """Write every scenario of the library next to this file."""
    import argparse

    argparse.ArgumentParser(description="Rewrite the scenario library scenarios/*.json.").parse_args()
    here = Path(__file__).resolve().parent
    for stem, sc in library().items():
        write_atomic(here / f"{stem}.json", dumps(sc))
        print(f"wrote scenarios/{stem}.json: {len(sc['cluster']['nodes'])} nodes, {len(sc['jobs'])} jobs")


if __name__ == "__main__":
    main()
