"""The library scenarios: unicron earns at least as much as every policy on average (slow)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from simfixtures import ROOT
from unicron_plan.simulate import DEFAULT_POLICIES, load_scenario, run_seeds

CASES = [("gpt3-mix-128-a800", 20), ("gpt3-mix-1024-a800", 6), ("gpt3-mix-16384-a800", 2)]


@pytest.mark.slow
@pytest.mark.parametrize("stem,seeds", CASES)
def test_unicron_is_not_beaten_on_average(stem, seeds):
    sc = load_scenario(ROOT / "scenarios" / f"{stem}.json")
    names = list(DEFAULT_POLICIES)
    start = time.perf_counter()
    runs = run_seeds(sc, names, 0, seeds, workers=2)
    per_seed = (time.perf_counter() - start) / seeds
    means = {n: np.mean([r["policies"][n]["weighted_tflop"] for r in runs]) for n in names}
    for n in names[1:]:
        assert means["unicron"] >= means[n] * (1 - 1e-9), (n, means)
    print(f"{stem}: {per_seed:.1f} s per seed (2 workers)")
