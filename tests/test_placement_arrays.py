"""A plan's placements held as arrays (unicron_plan.schema.placements) against the same plan with its
Placement models: the same placements when read, the same text written, the same verdict and the
same problems from the validator, on random instances and deliberately broken placements."""

from __future__ import annotations

import copy
import json
import pickle
import random

import numpy as np
import pytest

from unicron_plan import api
from unicron_plan.core.problem import build_problem
from unicron_plan.io import dumps
from unicron_plan.plan.assemble import to_plan
from unicron_plan.plan.validate import validate_plan
from unicron_plan.schema import Instance, Placement
from unicron_plan.schema.placements import PlacementArrays
from unicron_plan.solvers import SolverOptions, get_solver
from unicron_plan.tools.generate import ADVERSARIAL, generate_instance

KINDS = ("synthetic", "model") + ADVERSARIAL
ODD = ('"', "\\", "\u00e9", "\t", "\x7f", "\u2603")  # characters json.dumps escapes (and DEL, which it does not)


def _reference(plan) -> str:
    """The text the writer must give: json.dumps of the models' JSON form."""
    return json.dumps(plan.model_dump(mode="json", exclude_none=True), indent=2, sort_keys=True) + "\n"


def _odd_ids(doc: dict, rng: random.Random) -> dict:
    """``doc`` with some node ids holding characters the writer escapes."""
    rename = {}
    for node in doc["cluster"]["nodes"]:
        if rng.random() < 0.3:
            rename[node["id"]] = node["id"] + rng.choice(ODD)
            node["id"] = rename[node["id"]]
    for job in doc["jobs"]:
        job["current"]["nodes"] = [rename.get(n, n) for n in job["current"]["nodes"]]
    event = doc.get("event") or {}
    if "failed_nodes" in event:
        event["failed_nodes"] = [rename.get(n, n) for n in event["failed_nodes"]]
    for g in event.get("failed_gpus", []):
        g["node"] = rename.get(g["node"], g["node"])
    return doc


def _instances(count: int, seed: int):
    rng = random.Random(seed)
    for k in range(count):
        doc = generate_instance(k, gpus=rng.choice([256, 512, 1024]), jobs=rng.randint(2, 12),
                                max_counts=rng.randint(5, 40), failed_nodes=rng.randint(0, 3),
                                curves=KINDS[k % len(KINDS)], placement=rng.choice(["shuffled", "ordered"]))
        if k % 3 == 0:
            for node in doc["cluster"]["nodes"]:
                if rng.random() < 0.2:
                    node.pop("rack", None)
        if k % 4 == 1:
            doc = _odd_ids(doc, rng)
        yield api.load_instance(doc)


def _both(instance: Instance):
    """(plan with its placements held as arrays, the same plan with its models), and the problem."""
    problem = build_problem(instance)
    raw = get_solver("auto")(problem, SolverOptions(time_limit_seconds=30))
    held = to_plan(problem, raw, "auto", 0.0)
    made = to_plan(problem, raw, "auto", 0.0, arrays=False)
    return held, made, problem


@pytest.mark.parametrize("seed", range(3))
def test_the_arrays_give_the_models_and_the_text_of_the_model_path(seed):
    for instance in _instances(12, seed):
        held, made, problem = _both(instance)
        assert held.placement_arrays() is not None and made.placement_arrays() is None
        text = dumps(held)
        assert held.placement_arrays() is not None  # written from the arrays: no model made
        assert text == dumps(made) == _reference(made)
        report = validate_plan(instance, held, derived=problem.derived())
        assert held.placement_arrays() is not None  # checked on the arrays
        want = validate_plan(instance, made, derived=problem.derived())
        assert report.valid and want.valid and report.objective == want.objective
        # read as models: the same, made once for every job
        assert [j.placement for j in held.jobs] == [j.placement for j in made.jobs]
        assert held.placement_arrays() is None
        assert held.model_dump_json() == made.model_dump_json()  # (fields in the same order)
        assert held == made and dumps(held) == text


@pytest.mark.parametrize("seed", range(2))
def test_an_entry_written_from_the_arrays_is_its_models_json(seed):
    # PlanJob.json_bytes writes a held placement from the arrays where every node id is plain, and
    # dumps the models otherwise (odd ids: quotes, backslashes, control and non-ASCII characters)
    plain = odd = 0
    for instance in _instances(12, 10 + seed):
        held, made, _ = _both(instance)
        texts = [pj.json_bytes() for pj in held.jobs]
        if held.placement_arrays() is not None:  # written without making any model
            plain += 1
        else:
            odd += 1
        assert texts == [pj.model_dump_json(exclude_none=True).encode() for pj in made.jobs]
        assert [json.loads(t)["placement"] for t in texts] == \
            [[{"node": p.node, "gpus": p.gpus} for p in pj.placement] for pj in made.jobs]
    assert plain and odd


@pytest.mark.parametrize("seed", range(2))
def test_a_plans_text_from_its_entries_is_its_models_json(seed):
    # the service's text of a whole plan (its entries written by json_bytes, the rest around them) is
    # the models' JSON byte for byte, and writing it makes no placement model of the held plan
    from unicron_plan.schema.plan import _plain_ids
    from unicron_plan.service.answers import plan_text

    plain = odd = 0
    for instance in _instances(12, 20 + seed):
        held, made, _ = _both(instance)
        arrays = held.placement_arrays()
        assert plan_text(held) == made.model_dump_json(exclude_none=True).encode()
        if arrays is not None and _plain_ids(arrays.names):
            assert held.placement_arrays() is arrays  # still held: no model made
            plain += 1
        else:
            odd += 1
    assert plain and odd


def test_every_way_of_reading_a_job_makes_its_placement():
    instance = next(_instances(1, 7))
    for use in (lambda p: p.model_dump(), lambda p: p.jobs[0].model_dump(), lambda p: copy.deepcopy(p),
                lambda p: pickle.loads(pickle.dumps(p)), lambda p: p.model_copy(deep=True),
                lambda p: p.jobs[-1].model_copy(), lambda p: repr(p.jobs[0]), lambda p: dict(p.jobs[0])):
        held, made, _ = _both(instance)
        got = use(held)
        want = use(made)
        if isinstance(got, str):
            assert got == want
        elif hasattr(got, "model_dump"):
            assert got.model_dump() == want.model_dump()
        else:
            assert got == want


def _pairs(plan) -> list[list[tuple[str, int]]]:
    return [[(p.node, p.gpus) for p in job.placement] for job in plan.jobs]


def _arrays(pairs, names: list[str]) -> PlacementArrays:
    at = {n: k for k, n in enumerate(names)}
    starts = np.zeros(len(pairs) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in pairs], out=starts[1:])
    node = np.asarray([at[n] for p in pairs for n, _ in p], dtype=np.int64)
    gpus = np.asarray([g for p in pairs for _, g in p], dtype=np.int64)
    return PlacementArrays(names, starts, node, gpus)


def _break(pairs, ids: list[str], rng: random.Random):
    """``pairs`` with one to three deliberate faults: a count changed, a node listed twice, a node
    replaced by another of the cluster (drained, of another type, overfilled) or by an unknown one,
    an entry dropped or added, a job's entries reversed."""
    pairs = [list(p) for p in pairs]
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(len(pairs))
        entries = pairs[k]
        fault = rng.choice(["count", "twice", "other", "unknown", "drop", "add", "reverse"])
        if fault == "count" and entries:
            at = rng.randrange(len(entries))
            n, g = entries[at]
            entries[at] = (n, max(1, g + rng.choice([-1, 1, 8])))
        elif fault == "twice" and entries:
            entries.insert(rng.randrange(len(entries) + 1), rng.choice(entries))
        elif fault == "other" and entries:
            at = rng.randrange(len(entries))
            entries[at] = (rng.choice(ids), entries[at][1])
        elif fault == "unknown" and entries:
            at = rng.randrange(len(entries))
            entries[at] = ("ghost-" + str(rng.randrange(3)), entries[at][1])
        elif fault == "drop" and entries:
            entries.pop(rng.randrange(len(entries)))
        elif fault in ("add", "drop", "count", "twice", "other", "unknown"):
            entries.append((rng.choice(ids), rng.randint(1, 8)))
        else:
            entries.reverse()
    return pairs


@pytest.mark.parametrize("seed", range(4))
def test_the_validator_on_broken_arrays_reports_what_it_reports_on_the_models(seed):
    rng = random.Random(100 + seed)
    broken_seen = 0
    for instance in _instances(10, seed + 10):
        _, made, problem = _both(instance)
        ids = problem.state.node_ids()
        for trial in range(6):
            pairs = _break(_pairs(made), ids, rng)
            models = copy.deepcopy(made)
            for job, entries in zip(models.jobs, pairs):
                job.placement = [Placement(node=n, gpus=g) for n, g in entries]
            extra = sorted({n for p in pairs for n, _ in p} - set(ids))
            for names, derived in (((ids, problem.derived()),) if not extra else ()) + \
                                  ((list(ids) + extra, None), (extra + list(reversed(ids)), None)):
                held = copy.deepcopy(made)
                held.hold_placements(_arrays(pairs, names))
                assert held.placement_arrays() is not None
                got = validate_plan(instance, held, derived=derived)
                assert held.placement_arrays() is not None
                want = validate_plan(instance, models, derived=derived)
                assert (got.valid, got.problems, got.objective) == (want.valid, want.problems, want.objective)
                assert dumps(held) == dumps(models) == _reference(models)  # (so read back, the same plan)
            broken_seen += not want.valid
    assert broken_seen >= 20  # the faults were found (by both paths)


def test_a_plan_changed_after_it_was_made_is_written_and_checked_from_its_models():
    instance = next(_instances(1, 3))
    held, made, problem = _both(instance)
    k = next(i for i, j in enumerate(made.jobs) if j.placement)
    held.jobs[k].placement = held.jobs[k].placement[:-1] + [Placement(node="ghost", gpus=1)]
    assert held.placement_arrays() is None
    assert dumps(held) == _reference(held)
    assert "unknown node 'ghost'" in " ".join(validate_plan(instance, held, derived=problem.derived()).problems)
    held, _, _ = _both(instance)
    held.jobs[0].waf_tflops = 5  # an integer in a float field, set without validation: written as 5.0
    text = dumps(held)
    assert text == _reference(held) and '"waf_tflops": 5.0' in text
    held, _, _ = _both(instance)
    held.jobs = held.jobs[:-1]  # a list of other jobs than those held
    assert held.placement_arrays() is None
    assert dumps(held) == _reference(held)


def test_solve_writes_and_validates_without_placement_models():
    plan = api.solve(next(_instances(1, 5)))
    assert plan.placement_arrays() is not None
    dumps(plan)
    assert plan.placement_arrays() is not None


def test_place_held_gives_places_placement_and_its_arrays():
    from unicron_plan.plan.placement import place, place_held

    for instance in _instances(16, 21):
        problem = build_problem(instance)
        raw = get_solver("auto")(problem, SolverOptions(time_limit_seconds=30))
        want = place(problem, raw.counts)
        got, held = place_held(problem, raw.counts)
        assert got == want
        assert [list(s.items()) for s in got.values()] == [list(s.items()) for s in want.values()]  # (order too)
        assert held is not None and held.splits() == [want[j.id] for j in problem.jobs]
        assert held.names is problem.state.node_ids() or held.names == problem.state.node_ids()


def _doing_before(action, x, y):
    """reasons.doing as it was: every sentence formatted, one picked."""
    return {
        "keep": f"kept at {x} GPUs",
        "shrink": f"shrunk from {x} to {y} GPUs",
        "grow": f"grown from {x} to {y} GPUs",
        "restart": f"restarted at {y} GPUs",
        "suspend": f"suspended ({x} GPUs to 0)",
        "resume": f"resumed on {y} GPUs",
        "idle": "left at 0 GPUs",
    }.get(action, f"{action} ({x} to {y} GPUs)")


def test_the_sentences_of_the_actions_are_those_formatted_before():
    from unicron_plan.plan.reasons import doing

    rng = random.Random(5)
    for action in ("keep", "shrink", "grow", "restart", "suspend", "resume", "idle", "other", "", "keep "):
        for _ in range(20):
            x, y = rng.randint(0, 10**6), rng.randint(0, 10**6)
            assert doing(action, x, y) == _doing_before(action, x, y)
