"""Predicted vs published throughput for every row of Megatron's Table 1 (and other points).

    PYTHONPATH=. python benchmarks/perf_megatron_table.py            # print the tables
    PYTHONPATH=. python benchmarks/perf_megatron_table.py --calibrate  # refit a100 constants first

--calibrate fits the a100/megatron-sc21 constants to the CSV with
unicron_plan.perf.calibrate (the table's (tp, pp, dp), micro-batch and
interleaving searched, also_best on) and rewrites models/efficiency.json.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "docs" / "data" / "megatron_table1.csv"


def rows():
    """The CSV rows as dicts (comment lines skipped)."""
    with CSV.open() as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def model_name(r) -> str:
    return f"megatron-{float(r['params_billion']):g}b"


def calibrate_points() -> dict:
    pts = []
    for r in rows():
        tp, pp, n = int(r["tp"]), int(r["pp"]), int(r["gpus"])
        pts.append({"model": model_name(r), "global_batch": int(r["global_batch"]), "seq_len": 2048,
                    "recompute": "full", "tp": tp, "pp": pp, "dp": n // (tp * pp),
                    "hardware_tflops_per_gpu": float(r["tflops_per_gpu"])})
    from unicron_plan.perf.library import FIT_NAMES
    return {"gpu_type": "a100", "stack": "megatron-sc21", "fit": list(FIT_NAMES),
            "also_best": True, "points": pts}


#: Llama 3 405B pre-training (Dubey et al. 2024, Table 4): TP 8, PP 16, 8K sequences,
#: 16M tokens per batch (2048 sequences), BF16, no activation recomputation; model TFLOP/s.
LLAMA3_POINTS = [
    {"model": "llama3-405b", "global_batch": 2048, "seq_len": 8192, "recompute": "none",
     "tp": 8, "pp": 16, "dp": 64, "hardware_tflops_per_gpu": 430.0},
    {"model": "llama3-405b", "global_batch": 2048, "seq_len": 8192, "recompute": "none",
     "tp": 8, "pp": 16, "dp": 128, "hardware_tflops_per_gpu": 400.0},
]


def table() -> list[float]:
    from unicron_plan.perf import derive_table
    from unicron_plan.perf.layouts import ranked, search
    from unicron_plan.perf.library import get_efficiency, get_gpu, get_model

    print("| model | GPUs | batch | published (t,p) | published TFLOP/s | predicted best layout (t,p,d,b,v) "
          "| predicted TFLOP/s | error | rank of published (t,p) |")
    print("|---|---|---|---|---|---|---|---|---|")
    errs = []
    for r in rows():
        name, n, b = model_name(r), int(r["gpus"]), int(r["global_batch"])
        p = derive_table(name, "a100", b, 2048, recompute="full", gpus=[n]).points[0]  # the runs recomputed fully
        c = search(get_model(name), get_gpu("a100"), get_efficiency("a100"), b, 2048, "full", counts=[n])
        order = []
        for i in ranked(c, n):
            key = (int(c.tp[i]), int(c.pp[i]))
            if key not in order:
                order.append(key)
        pub = float(r["tflops_per_gpu"])
        err = p.hardware_tflops_per_gpu / pub - 1
        errs.append(err)
        key = (int(r["tp"]), int(r["pp"]))
        rank = order.index(key) + 1 if key in order else "absent"
        print(f"| {name} | {n} | {b} | ({key[0]},{key[1]}) | {pub:.0f} | ({p.tp},{p.pp},{p.dp},{p.micro_batch},"
              f"{p.virtual_stages}) | {p.hardware_tflops_per_gpu:.1f} | {err * 100:+.1f}% | {rank} |")
    abs_errs = [abs(e) for e in errs]
    print(f"\nmax |error| {max(abs_errs) * 100:.1f}%, median |error| {statistics.median(abs_errs) * 100:.1f}%")
    return errs


OTHER = [  # (model, gpu, batch, seq, recompute, stack, GPUs, published, kind, published layout, used for fitting, source)
    ("gpt3-175b", "a100", 1536, 2048, "full", None, 1536, 140, "hardware", (8, 12, 16, 1), "no",
     "Narayanan et al. SC'21 (arXiv 2104.04473), Sec. 5.1: GPT-3 175B on 1536 A100, ~140 TFLOP/s/GPU"),
    ("llama3-405b", "h100", 2048, 8192, "auto", None, 8192, 430, "model", (8, 16, 64, 1), "yes (h100 gemm)",
     "Dubey et al. 2024 (arXiv 2407.21783), Table 4: TP8 CP1 PP16 DP64"),
    ("llama3-405b", "h100", 2048, 8192, "auto", None, 16384, 400, "model", (8, 16, 128, 1), "yes (h100 gemm)",
     "Dubey et al. 2024, Table 4: TP8 CP1 PP16 DP128"),
    ("llama3-405b", "h100", 128, 131072, "auto", None, 16384, 380, "model", (8, 16, 8, 16), "no",
     "Dubey et al. 2024, Table 4: TP8 CP16 PP16 DP8, sequence 131072, 16M tokens per batch"),
    ("deepseek-v3", "h800", 15360, 4096, "auto", "megatron-core-fp8", 2048, 1543, "tokens/s/GPU", None, "no",
     "DeepSeek-V3 report (arXiv 2412.19437), Sec. 1: 180K H800 GPU hours per trillion tokens on 2048 H800 "
     "(1e12 / (180e3 x 3600) = 1543 tokens/s/GPU); batch 15360 x 4096 (Sec. 4.2); FP8 GEMMs (hence the "
     "FP8 stack), DualPipe, EP64 PP16"),
    ("deepseek-v3", "h800", 15360, 4096, "auto", None, 2048, 1543, "tokens/s/GPU", None, "no",
     "not a published configuration: the same row with BF16 GEMMs (the h800 default stack), which "
     "DeepSeek-V3 did not use; shown for the weight of the precision, not counted against the target"),
]


def _value(p, kind: str) -> float:
    if kind == "hardware":
        return p["hardware_tflops_per_gpu"]
    if kind == "model":
        return p["model_tflops_per_gpu"]
    return p["tokens_per_second"] / p["gpus"]


def other() -> None:
    from unicron_plan.perf import derive_table, rank_layouts
    print("\n| model | GPU | GPUs | batch x seq | stack | published (kind) | predicted at defaults | error | "
          "layout (t,p,d,cp,ep,v,recompute) | at the published layout | error | fitted on it? | source |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (m, g, b, s, rc, stack, n, pub, kind, lay, fit, src) in OTHER:
        pts = derive_table(m, g, b, s, recompute=rc, gpus=[n], stack=stack).points
        st = stack or "default"
        if not pts:
            print(f"| {m} | {g} | {n} | {b}x{s} | {st} | {pub} ({kind}) | no fitting layout | | | | | {fit} | {src} |")
            continue
        p = pts[0]
        d = {"hardware_tflops_per_gpu": p.hardware_tflops_per_gpu, "model_tflops_per_gpu": p.model_tflops_per_gpu,
             "tokens_per_second": p.tokens_per_second, "gpus": n}
        val = _value(d, kind)
        at, at_err = "", ""
        if lay is not None:
            rows = [r for r in rank_layouts(m, g, b, s, n, recompute=rc, stack=stack)
                    if (r["tp"], r["pp"], r["dp"], r["cp"]) == lay]
            if rows:
                r = dict(rows[0], tokens_per_second=b * s / rows[0]["iteration_seconds"], gpus=n)
                v2 = _value(r, kind)
                at, at_err = f"{v2:.1f}", f"{(v2 / pub - 1) * 100:+.1f}%"
            else:
                at = "does not fit"
        print(f"| {m} | {g} | {n} | {b}x{s} | {st} | {pub} ({kind}) | {val:.1f} | {(val / pub - 1) * 100:+.1f}% | "
              f"({p.tp},{p.pp},{p.dp},{p.cp},{p.ep},{p.virtual_stages},{p.recompute}) | {at} | {at_err} | {fit} | {src} |")


def timing() -> None:
    from unicron_plan.perf import _derive, derive_table
    for m, b in (("gpt3-175b", 1536), ("llama2-70b", 1024), ("megatron-1.7b", 512)):
        for rc in ("full", "auto"):
            _derive.cache_clear()
            t0 = time.perf_counter()
            c = derive_table(m, "a100", b, 2048, recompute=rc, max_gpus=2048)
            t1 = time.perf_counter()
            derive_table(m, "a100", b, 2048, recompute=rc, max_gpus=2048)
            t2 = time.perf_counter()
            print(f"derive_table({m}, a100, batch {b}, recompute {rc}, max_gpus=2048): {len(c.points)} counts, "
                  f"{(t1 - t0) * 1000:.1f} ms cold, {(t2 - t1) * 1e6:.1f} us cached")


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Predicted vs published Megatron throughput, and timings.")
    ap.add_argument("--calibrate", action="store_true",
                    help="first refit models/efficiency.json to the published points (rewrites it)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.calibrate:
        from unicron_plan.perf.calibrate import calibrate
        with tempfile.TemporaryDirectory() as d:
            pts = Path(d) / "points.json"
            pts.write_text(json.dumps(calibrate_points()))
            consts = calibrate(str(pts), str(ROOT / "models" / "efficiency.json"))
        print("fitted a100:", json.dumps(consts, indent=1))
        from unicron_plan.perf import clear_caches
        clear_caches()
        h100 = {"gpu_type": "h100", "stack": "megatron-core-2024", "fit": ["gemm_efficiency"],
                "also_best": True, "points": LLAMA3_POINTS}
        with tempfile.TemporaryDirectory() as d:
            pts = Path(d) / "points.json"
            pts.write_text(json.dumps(h100))
            consts = calibrate(str(pts), str(ROOT / "models" / "efficiency.json"))
        print("fitted h100:", json.dumps(consts, indent=1))
        clear_caches()
    table()
    other()
    timing()


if __name__ == "__main__":
    main()
