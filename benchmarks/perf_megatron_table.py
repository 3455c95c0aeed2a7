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


OTHER = [  # (model, gpu, batch, seq, recompute, GPUs, published TFLOP/s per GPU, kind, source)
    ("gpt3-175b", "a100", 1536, 2048, "full", 1536, 140, "hardware",
     "Narayanan et al. SC'21 (GPT-3 175B on 1536 A100, ~140 TFLOP/s/GPU)"),
    ("llama3-405b", "h100", 2048, 8192, "none", 8192, 430, "model", "Llama 3 paper, Table 4 (TP8 PP16)"),
    ("llama3-405b", "h100", 2048, 8192, "none", 16384, 400, "model", "Llama 3 paper, Table 4 (TP8 PP16)"),
]


def other() -> None:
    from unicron_plan.perf import derive_table
    print("\n| model | GPU | GPUs | batch x seq | recompute | published TFLOP/s/GPU (kind) | predicted | error | "
          "predicted layout (t,p,d,b,v) | source |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (m, g, b, s, rc, n, pub, kind, src) in OTHER:
        pts = derive_table(m, g, b, s, recompute=rc, gpus=[n]).points
        if not pts:
            print(f"| {m} | {g} | {n} | {b}x{s} | {rc} | {pub} ({kind}) | no fitting layout | | | {src} |")
            continue
        p = pts[0]
        val = p.hardware_tflops_per_gpu if kind == "hardware" else p.model_tflops_per_gpu
        print(f"| {m} | {g} | {n} | {b}x{s} | {rc} | {pub} ({kind}) | {val:.1f} | {(val / pub - 1) * 100:+.1f}% | "
              f"({p.tp},{p.pp},{p.dp},{p.micro_batch},{p.virtual_stages}) | {src} |")


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
        from unicron_plan.perf.library import clear_caches
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
