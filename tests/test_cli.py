"""CLI tests: solve, validate, schema, and one test per kind of bad input (exit 2, field named)."""

import copy
import json

import pytest
from typer.testing import CliRunner

from unicron_plan.cli import app

from conftest import ROOT

TINY = ROOT / "instances" / "tiny-one-job-two-nodes.json"


@pytest.fixture
def runner():
    return CliRunner()


def test_solve_prints_plan(runner):
    res = runner.invoke(app, ["solve", str(TINY)])
    assert res.exit_code == 0
    plan = json.loads(res.stdout)
    assert plan["objective"] == 38697000.0 and plan["status"]["solution"] == "optimal"


def test_solve_out_then_validate(runner, tmp_path):
    out = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", str(TINY), "--out", str(out)]).exit_code == 0
    res = runner.invoke(app, ["validate", str(TINY), str(out)])
    assert res.exit_code == 0 and "valid" in res.stdout


def test_validate_rejects_corrupted_plan_with_exit_1(runner, tmp_path):
    res = runner.invoke(app, ["solve", str(TINY)])
    plan = json.loads(res.stdout)
    plan["jobs"][0]["gpus"] = 16
    plan["jobs"][0]["placement"] = [{"node": "n0", "gpus": 8}, {"node": "n1", "gpus": 8}]
    plan["jobs"][0]["nodes"] = ["n0", "n1"]
    path = tmp_path / "bad-plan.json"
    path.write_text(json.dumps(plan))
    res = runner.invoke(app, ["validate", str(TINY), str(path)])
    assert res.exit_code == 1
    assert "failed or drained" in res.stderr


def test_schema_commands(runner):
    for kind, field in [("instance", "cluster"), ("plan", "objective"), ("signals", "signals"), ("action", "outcome")]:
        res = runner.invoke(app, ["schema", kind])
        assert res.exit_code == 0
        assert field in json.loads(res.stdout)["properties"]


def test_unknown_solver_lists_valid_ones(runner):
    res = runner.invoke(app, ["solve", str(TINY), "--solver", "nope"])
    assert res.exit_code == 2 and "dp" in res.stderr and res.stdout == ""


def _base():
    return json.loads(TINY.read_text())


def _mutated(fn):
    d = copy.deepcopy(_base())
    fn(d)
    return json.dumps(d)


BAD_INPUTS = {
    "malformed-json": ('{"schema_version": "1", ', "line 1"),
    "nan": (TINY.read_text().replace("36000.0", "NaN"), "NaN"),
    "infinity": (TINY.read_text().replace("36000.0", "Infinity"), "Infinity"),
    "huge-number": (TINY.read_text().replace("36000.0", "1e999"), "cost.expected_run_seconds"),
    "duplicate-key": (TINY.read_text().replace('"weight": 1.0', '"weight": 1.0, "weight": 2.0'), "weight"),
    "not-an-object": ("[1, 2]", "object"),
    "unknown-field": (_mutated(lambda d: d["jobs"][0].update(wieght=1.0)), "jobs[0].wieght"),
    "missing-field": (_mutated(lambda d: d["jobs"][0].pop("weight")), "jobs[0].weight"),
    "negative-weight": (_mutated(lambda d: d["jobs"][0].update(weight=-1.0)), "jobs[0].weight"),
    "negative-count": (_mutated(lambda d: d["jobs"][0]["current"].update(gpus=-8)), "jobs[0].current.gpus"),
    "negative-tflops": (_mutated(lambda d: d["jobs"][0]["throughput"]["tflops"].update({"4": -1.0})),
                        "jobs[0].throughput.tflops"),
    "bad-count-key": (_mutated(lambda d: d["jobs"][0]["throughput"]["tflops"].update({"0": 1.0})),
                      "jobs[0].throughput.tflops"),
    "string-for-int": (_mutated(lambda d: d["cluster"]["nodes"][0].update(gpus="8")), "cluster.nodes[0].gpus"),
    "duplicate-node-id": (_mutated(lambda d: d["cluster"]["nodes"][1].update(id="n0")), "cluster.nodes[1].id"),
    "duplicate-job-id": (_mutated(lambda d: d["jobs"].append(copy.deepcopy(d["jobs"][0]))), "jobs[1].id"),
    "unknown-gpu-type": (_mutated(lambda d: d["cluster"]["nodes"][0].update(gpu_type="h900")),
                         "cluster.nodes[0].gpu_type"),
    "unknown-job-gpu-type": (_mutated(lambda d: d["jobs"][0]["throughput"].update(gpu_type="h900")),
                             "jobs[0].throughput.gpu_type"),
    "unknown-current-node": (_mutated(lambda d: d["jobs"][0]["current"].update(nodes=["n0", "n7"])),
                             "jobs[0].current.nodes[1]"),
    "unknown-event-node": (_mutated(lambda d: d["event"].update(failed_nodes=["n7"])), "event.failed_nodes[0]"),
    "event-gpu-out-of-range": (_mutated(lambda d: d["event"].update(failed_gpus=[{"node": "n0", "gpu": 8}])),
                               "event.failed_gpus[0].gpu"),
    "failed-gpu-out-of-range": (_mutated(lambda d: d["cluster"]["nodes"][0].update(failed_gpus=[8])),
                                "cluster.nodes[0].failed_gpus[0]"),
    "current-not-in-table": (_mutated(lambda d: d["jobs"][0]["current"].update(gpus=12)), "jobs[0].current.gpus"),
    "current-overfills-nodes": (_mutated(lambda d: d["jobs"][0]["current"].update(gpus=32)),
                                "jobs[0].current.gpus"),
    "zero-gpus-with-nodes": (_mutated(lambda d: d["jobs"][0]["current"].update(gpus=0)), "jobs[0].current.nodes"),
    "shared-nodes-overfilled": (_mutated(lambda d: d["jobs"].append(
        {"id": "other", "weight": 1.0, "throughput": {"gpu_type": "a800", "tflops": {"8": 1.0}},
         "current": {"gpus": 8, "nodes": ["n1"]}})), "which share its nodes, do not fit"),
    "both-horizons": (_mutated(lambda d: d["cost"].update(node_mtbf_hours=100.0)), "cost"),
    "bad-schema-version": (_mutated(lambda d: d.update(schema_version="2")), "schema_version"),
    "bad-event-kind": (_mutated(lambda d: d["event"].update(kind="meteor")), "event"),
    "missing-transition": (_mutated(lambda d: (d["cost"].pop("default_transition_seconds"),
                                               d["jobs"][0].pop("transition_seconds"))),
                           "jobs[0].transition_seconds"),
}


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
@pytest.mark.parametrize("command", ["solve", "validate"])
def test_bad_input_exits_2_naming_the_field(runner, tmp_path, kind, command):
    text, field = BAD_INPUTS[kind]
    path = tmp_path / "in.json"
    path.write_text(text)
    args = ["solve", str(path)] if command == "solve" else ["validate", str(path), str(path)]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    assert field in res.stderr
    assert "Traceback" not in res.stderr and res.exception is None or isinstance(res.exception, SystemExit)
    assert len(res.stderr.strip().splitlines()) == 1


def test_missing_file_exits_2(runner, tmp_path):
    res = runner.invoke(app, ["solve", str(tmp_path / "nope.json")])
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_bad_plan_exits_2(runner, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text('{"objective": "lots"}')
    res = runner.invoke(app, ["validate", str(TINY), str(path)])
    assert res.exit_code == 2 and res.stdout == ""


def test_default_solver_is_dp_or_auto_when_the_dp_cannot_express_the_instance(runner):
    tp = ROOT / "instances" / "ip-tp-packing.json"
    res = runner.invoke(app, ["solve", str(tp)])
    assert res.exit_code == 0
    plan = json.loads(res.stdout)
    assert plan["solver"]["name"] == "auto" and plan["solver"]["options"]["backend"] != "dp"
    assert json.loads(runner.invoke(app, ["solve", str(TINY)]).stdout)["solver"]["name"] == "dp"
    res = runner.invoke(app, ["solve", str(tp), "--solver", "dp"])
    assert res.exit_code == 2 and "tp 4" in res.stderr and res.stdout == ""


def test_overflowing_terms_are_bad_input_not_a_crash(runner, tmp_path):
    d = _base()
    d["jobs"][0]["throughput"]["tflops"]["8"] = 1e308
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(d))
    res = runner.invoke(app, ["solve", str(path)])
    assert res.exit_code == 2 and "jobs[0]" in res.stderr and "overflows" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stdout == ""


def test_unexpected_errors_are_one_line_exit_3(runner, monkeypatch):
    from unicron_plan import api

    def boom(*a, **k):
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr(api, "solve", boom)
    monkeypatch.delenv("UNICRON_DEBUG", raising=False)
    res = runner.invoke(app, ["solve", str(TINY)])
    assert res.exit_code == 3 and "internal error" in res.stderr and "simulated bug" in res.stderr
    assert "Traceback" not in res.stderr


def test_validate_accepts_fields_added_by_other_producers(runner, tmp_path):
    plan = json.loads(runner.invoke(app, ["solve", str(TINY)]).stdout)
    plan["producer_note"] = "extra fields are allowed by docs/format.md"
    plan["jobs"][0]["priority_class"] = "gold"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    assert runner.invoke(app, ["validate", str(TINY), str(path)]).exit_code == 0
    del plan["jobs"][0]["gpus"]
    path.write_text(json.dumps(plan))
    res = runner.invoke(app, ["validate", str(TINY), str(path)])
    assert res.exit_code == 2 and "jobs[0].gpus" in res.stderr


def test_an_overflowing_transition_of_a_later_job_names_that_job(tmp_path):
    """F(x) x D_trans overflowing for the second job (the first is fine) is reported for jobs[1]."""
    from unicron_plan import api
    from unicron_plan.errors import InvalidInstanceError

    d = json.loads((ROOT / "instances" / "small-shared-node-failure.json").read_text())
    d["jobs"][1]["transition_seconds"] = 1e306
    d["jobs"][1]["weight"] = 1e10
    with pytest.raises(InvalidInstanceError) as err:
        api.solve(d)
    assert err.value.field == "jobs[1]" and "overflows" in err.value.message


def _entry_started(monkeypatch, tmp_path, argv):
    """Run cli.main(argv) in this process with the process's start replaced by a marker value;
    returns (the `started` instant the solve was given, the exit code)."""
    import gc

    from unicron_plan import api, cli, solvers

    marker = -1.0e9
    seen = {}
    real_solve = api.solve

    def solve(*a, **kw):
        seen["started"] = kw.get("started")
        return real_solve(*a, **kw)

    monkeypatch.setattr(solvers, "process_started", lambda: marker)
    monkeypatch.setattr(api, "solve", solve)
    monkeypatch.setattr(cli, "_exit_now", lambda code: (_ for _ in ()).throw(SystemExit(code)))
    was_enabled = gc.isenabled()
    try:
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
    finally:
        if was_enabled:
            gc.enable()
    return seen["started"] == marker, exc.value.code


def test_an_in_process_main_call_counts_its_time_limit_from_the_call(monkeypatch, tmp_path, capsys):
    """cli.main(argv) called by another program: the limit starts at the call, not at the process's
    start, and nothing stays set afterwards (a later call is unaffected, gc is left on)."""
    import gc

    from unicron_plan import cli

    args = ["solve", str(TINY), "--quiet", "--time-limit", "30", "--out", str(tmp_path / "p.json")]
    heap: list = []
    monkeypatch.setattr(cli, "_one_shot_memory", lambda: heap.append(1))
    for _ in range(2):
        from_process_start, code = _entry_started(monkeypatch, tmp_path, args)
        assert code == 0 and not from_process_start
        assert gc.isenabled() and cli._AS_PROCESS.get() is False
    assert not heap  # the C library's allocation left as it is in another program
    assert json.loads((tmp_path / "p.json").read_text())["objective"] == 38697000.0


def test_the_console_script_counts_its_time_limit_from_the_process_start(monkeypatch, tmp_path):
    """main() without argv is the process's own command line: the limit counts from the process's start."""
    from unicron_plan import cli

    monkeypatch.setattr("sys.argv", ["unicron-plan", "solve", str(TINY), "--quiet", "--out", str(tmp_path / "p.json")])
    heap: list = []
    monkeypatch.setattr(cli, "_one_shot_memory", lambda: heap.append(1))  # (not in the test's process)
    from_process_start, code = _entry_started(monkeypatch, tmp_path, None)
    assert code == 0 and from_process_start
    assert cli._AS_PROCESS.get() is False  # reset when the call returns
    assert heap == [1]


def test_a_solve_process_sets_its_memory_and_plans_the_same(tmp_path):
    """The console command's one-shot process raises glibc's mmap threshold (where glibc is the C
    library) and writes the plan the API returns."""
    import subprocess
    import sys

    from unicron_plan import api
    from unicron_plan.io import dumps

    out = tmp_path / "p.json"
    probe = "from unicron_plan import cli; cli._one_shot_memory(); print('done')"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    done = subprocess.run([sys.executable, "-m", "unicron_plan.cli", "solve", str(TINY), "-q", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ours, theirs = json.loads(out.read_text()), json.loads(dumps(api.solve(str(TINY))))
    ours["solver"].pop("wall_seconds"), theirs["solver"].pop("wall_seconds")
    assert ours == theirs


def test_a_solve_process_keeps_the_heaps_free_top(monkeypatch):
    """The one-shot process's memory settings: blocks of every size from the heap, the heap's free top
    kept (not given back to be faulted in again), both at glibc's largest value, and numpy's arrays on
    small pages."""
    from unicron_plan import cli, heap

    seen = []
    monkeypatch.setattr(heap, "set_malloc", lambda *args: seen.append(args) or True)
    monkeypatch.setattr(heap, "numpy_small_pages", lambda: seen.append("small pages") or True)
    cli._one_shot_memory()
    assert seen == [(2**31 - 1, 2**31 - 1), "small pages"]


@pytest.mark.parametrize("args,option", [
    (["--max-counts", "-1"], "--max-counts"), (["--max-counts", "0"], "--max-counts"), (["--jobs", "-1"], "--jobs"),
    (["--jobs", "0"], "--jobs"), (["--jobs", "100000000"], "--jobs"), (["--gpus-per-node", "0"], "--gpus-per-node"),
    (["--nodes-per-rack", "0"], "--nodes-per-rack"), (["--demand", "nan"], "--demand"), (["--demand", "inf"], "--demand"),
    (["--demand", "0"], "--demand"), (["--seed", "-1"], "--seed"), (["--gpus", str(2 ** 43)], "--gpus"),
    (["--scenario", "--duration-hours", "nan"], "--duration-hours"),
    (["--scenario", "--duration-hours", "0"], "--duration-hours"),
    (["--scenario", "--family", "jagged", "--gpus", "0"], "--gpus")])
def test_generate_refuses_options_out_of_range_naming_them(runner, tmp_path, args, option):
    # (a negative --max-counts looped for ever; others crashed or wrote files the package refuses)
    out = tmp_path / "x.json"
    base = [] if "--gpus" in args else ["--gpus", "64"]
    res = runner.invoke(app, ["generate", str(out), "-q", *base, *([] if "--jobs" in args or "--family" in args
                                                                  else ["--jobs", "4"]), *args])
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {option}"), (res.exit_code, res.stderr)
    assert not out.exists()


@pytest.mark.parametrize("command,args", [
    (["solve", str(TINY)], ["--threads", "0"]), (["solve", str(TINY)], ["--threads", "1000000"]),
    (["simulate", str(ROOT / "scenarios" / "gpt3-mix-1024-a800.json")], ["--seed", "-1"]),
    (["simulate", str(ROOT / "scenarios" / "gpt3-mix-1024-a800.json")], ["--workers", "5000"]),
    (["simulate", str(ROOT / "scenarios" / "gpt3-mix-1024-a800.json")], ["--seeds", "1000000000"])])
def test_work_options_are_bounded(runner, command, args):
    res = runner.invoke(app, [*command, *args])
    assert res.exit_code == 2 and args[0] in res.stderr and not res.stdout, (res.exit_code, res.stderr)


def test_api_threads_are_bounded():
    from unicron_plan import api
    from unicron_plan.errors import InvalidInstanceError

    for threads in (0, 10 ** 6, True, 2.5):
        with pytest.raises(InvalidInstanceError, match="threads"):
            api.solve(TINY, threads=threads)


@pytest.mark.parametrize("source", [None, 3, ["x"], b"{}", object(), "", "   "])
def test_api_sources_of_another_type_are_bad_input(source):
    from unicron_plan import api
    from unicron_plan.errors import InvalidInstanceError

    for call in (api.load_instance, api.load_plan, api.solve):
        with pytest.raises(InvalidInstanceError):
            call(source)


@pytest.mark.parametrize("limit", [0, -1.0, float("nan"), float("inf"), 1e10, 10 ** 400, True, "5"])
def test_api_time_limits_are_bounded(limit):
    from unicron_plan import api
    from unicron_plan.errors import InvalidInstanceError

    with pytest.raises(InvalidInstanceError, match="time_limit_seconds"):
        api.solve(TINY, time_limit_seconds=limit)


@pytest.mark.parametrize("limit", ["1e10", "inf", "nan"])
def test_cli_time_limit_is_bounded(runner, limit):
    res = runner.invoke(app, ["solve", str(TINY), "--time-limit", limit])
    assert res.exit_code == 2 and "--time-limit" in res.stderr and not res.stdout


def test_a_plot_into_a_fifo_writes_into_it_and_keeps_it(tmp_path):
    # (a rename over a device or FIFO replaced it: run as root with --plot /dev/null, /dev/null was gone)
    import os
    import threading

    pytest.importorskip("matplotlib")
    fifo = tmp_path / "plot.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    res = CliRunner().invoke(app, ["simulate", str(ROOT / "scenarios" / "gpt3-mix-1024-a800.json"), "-q",
                                   "--policy", "unicron", "--plot", str(fifo)])
    reader.join(timeout=120)
    assert res.exit_code == 0, res.output
    assert fifo.is_fifo() and got and got[0].startswith(b"\x89PNG")
