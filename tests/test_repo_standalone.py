"""The repository stands alone and its docs say what the code does."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT

PRODUCT = [p for p in ROOT.rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".toml", ".cfg", ".txt", "")
           and not any(part.startswith(".") and part != ".ci" for part in p.relative_to(ROOT).parts)
           and "__pycache__" not in p.parts and p.name != "WORK_RULES.md"
           and not any(part.endswith(".egg-info") or part == "build" for part in p.relative_to(ROOT).parts)]


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def test_readme_set_up_is_two_commands_and_ci_runs_them():
    out = subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_commands.py")], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == ['pip install . && unicron-plan solve instances/tiny-one-job-two-nodes.json',
                   'pip install ".[test]" && pytest']
    ci = (ROOT / ".ci" / "run").read_text()
    assert "readme_commands.py" in ci and "python3 -m venv" in ci
    assert (ROOT / "instances" / "tiny-one-job-two-nodes.json").exists()


def test_pytest_comes_with_the_test_extra():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("pytest") for r in extras["test"]) and "unicron-plan[all]" in extras["test"]


def test_no_pointer_outside_the_repository_and_no_issue_numbers():
    # (Spelled with character classes so that this file does not match itself.)
    bad = re.compile(r"\.\./sh[a]red|/w[o]rk/|\bis[s]ue \d|\(is[s]ue|\bwork[t]ree\b|for the le[a]d")
    hits = []
    for p in PRODUCT:
        for k, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if bad.search(line):
                hits.append(f"{p.relative_to(ROOT)}:{k}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


def test_help_texts_are_clean():
    from typer.testing import CliRunner

    from unicron_plan.cli import full_app

    app = full_app()
    runner = CliRunner()
    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    for name in [None] + names:
        out = runner.invoke(app, ([name] if name else []) + ["--help"]).output
        assert not re.search(r"is[s]ue \d|\(is[s]ue|\.\./sh[a]red|work[t]ree", out), (name, out)


def test_readme_commands_table_is_one_table_and_lists_every_command():
    text = _readme()
    table = text[text.index("## Commands"):]
    rows = []
    for line in table.splitlines()[1:]:
        if line.startswith("#"):
            break
        rows.append(line)
    block = "\n".join(rows).strip().split("\n\n")[0].splitlines()
    assert all(r.startswith("|") for r in block)
    listed = "\n".join(block)
    assert "schema instance\\|plan\\|scenario" in listed
    from unicron_plan.cli import full_app

    for c in full_app().registered_commands:
        name = c.name or c.callback.__name__
        assert f"unicron-plan {name}" in listed, name


def test_docs_state_the_largest_library_instance():
    sizes = {}
    for p in (ROOT / "instances").glob("*.json"):
        d = json.loads(p.read_text())
        sizes[p.stem] = sum(n["gpus"] for n in d["cluster"]["nodes"])
    name = max(sizes, key=sizes.get)
    text = (ROOT / "docs" / "solvers.md").read_text()
    assert f"`{name}` ({sizes[name]:,} GPUs)" in text


def test_instances_readme_counts_jobs_and_gpus_right():
    text = (ROOT / "instances" / "README.md").read_text()
    checked = 0
    for m in re.finditer(r"^\| ([a-z0-9-]+) \| (\d+) \| (\d+)\b", text, re.M):
        path = ROOT / "instances" / f"{m.group(1)}.json"
        d = json.loads(path.read_text())
        assert sum(n["gpus"] for n in d["cluster"]["nodes"]) == int(m.group(2)), m.group(1)
        assert len(d["jobs"]) == int(m.group(3)), m.group(1)
        checked += 1
    assert checked >= 4


def test_simulate_table_header_matches_its_values(capsys):
    from unicron_plan.cli import _print_summary

    result = {"scenario": "s", "seed": 0, "policies": {
        "unicron": {"weighted_tflop": 2.0, "reconfigurations": 1,
                    "downtime_hours": {"detection": 0, "transition": 0, "sub_healthy": 0}},
        "megatron": {"weighted_tflop": 1.0, "reconfigurations": 1,
                     "downtime_hours": {"detection": 0, "transition": 0, "sub_healthy": 0}}}}
    _print_summary(result, ["unicron", "megatron"])
    out = capsys.readouterr().out
    assert "unicron / policy" in out and "2.0000" in out  # 2.0 / 1.0
    assert "unicron / policy" in (ROOT / "docs" / "simulation.md").read_text()


def test_baseline_compares_the_ip_solvers():
    """The IP solvers are in the baseline beside dp on the committed jagged and tiny instances;
    the adversarial kinds (where the IP solvers need minutes) record dp."""
    base = json.loads((ROOT / "benchmarks" / "baseline.json").read_text())
    ip_checked = 0
    for name, entry in base["instances"].items():
        assert entry["solvers"]["dp"]["status"] == "ok", name
        if name.startswith(("instances/jagged", "instances/tiny")):
            ip_checked += 1
            for solver in ("milp", "cpsat"):
                assert entry["solvers"][solver]["status"] == "ok", (name, solver)
    assert ip_checked >= 3


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
                         + ["../scripts/build_instances.py", "../scenarios/build.py"])
def test_scripts_only_print_help_on_help(script, tmp_path):
    path = (ROOT / "benchmarks" / script).resolve()
    watched = list((ROOT / "instances").glob("*.json")) + list((ROOT / "benchmarks").glob("*.json")) \
        + list((ROOT / "models").glob("*.json")) + list((ROOT / "scenarios").glob("*.json")) \
        + list((ROOT / "docs").glob("*.png"))
    before = {p: p.stat().st_mtime_ns for p in watched}
    r = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=60,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and "usage" in r.stdout.lower(), (script, r.stdout[-500:], r.stderr[-500:])
    assert {p: p.stat().st_mtime_ns for p in watched} == before


def test_license_file_matches_the_declared_license():
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    text = (ROOT / "LICENSE").read_text()
    assert declared == "MIT" and text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text


def _readme_rows() -> list[tuple[str, str]]:
    """(command words after 'unicron-plan', the usage) of every row of the README's command table."""
    rows = []
    for m in re.finditer(r"^\| `unicron-plan ([^`]*)` \|", _readme(), re.M):
        usage = m.group(1).replace("\\|", "|")
        words = re.match(r"[a-z][a-z0-9 -]*?(?= [A-Z\[(-]|$)", usage)
        rows.append((words.group(0) if words else usage, usage))
    return rows


def test_readme_command_rows_name_only_options_the_commands_have():
    import typer.main

    from unicron_plan.cli import full_app

    root = typer.main.get_command(full_app())
    checked = 0
    for words, usage in _readme_rows():
        cmd = root
        for w in words.split():
            cmd = cmd.commands[w] if hasattr(cmd, "commands") and w in cmd.commands else cmd
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        for opt in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", usage):
            assert opt in known, (words, opt)
            checked += 1
    assert checked >= 30


@pytest.mark.parametrize("words,files", [
    ("import k8s", {"N.json": "examples/k8s/mixed/nodes.json", "P.json": "examples/k8s/mixed/pods.json",
                    "J.json": "examples/k8s/mixed/pytorchjobs.json"}),
    ("import slurm", {"N.json": "examples/slurm/mixed/sinfo-22.05.json",
                      "J.json": "examples/slurm/mixed/squeue-22.05.json"}),
])
def test_readme_import_rows_required_parts_are_enough_to_run(words, files, tmp_path):
    # The row without its [optional] parts, each (A | B) as A, runs on the mixed-fleet examples.
    import shlex

    from typer.testing import CliRunner

    from unicron_plan.cli import full_app

    usage = dict(reversed(_readme_rows()))[words]  # its first row
    usage = re.sub(r"\[[^\]]*\]", "", usage)
    usage = re.sub(r"\(([^|)]*)\|[^)]*\)", r"\1", usage)
    args = [files.get(a, a) for a in shlex.split(usage)]
    args = ["36000" if a == "S" else a for a in args] + ["--out", str(tmp_path / "i.json")]
    res = CliRunner().invoke(full_app(), [str(ROOT / a) if a.startswith("examples/") else a for a in args])
    assert res.exit_code == 0, (args, res.output)
    assert json.loads((tmp_path / "i.json").read_text())["jobs"]


def test_options_the_docs_give_a_value_take_one():
    # `--opt VALUE` in README.md and docs/*.md names an option that takes a value in some command
    # (a flag such as simulate's --json written with a FILE would mislead).
    import typer.main

    from unicron_plan.cli import full_app

    def walk(cmd):
        yield cmd
        for sub in getattr(cmd, "commands", {}).values():
            yield from walk(sub)

    valued = {o for cmd in walk(typer.main.get_command(full_app())) for p in cmd.params
              if not getattr(p, "is_flag", False) for o in p.opts}
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        found += [(path.name, m) for m in re.findall(r"`(--[a-z][a-z0-9-]*) [A-Z][A-Z.]*`", path.read_text())]
    assert len(found) >= 10
    assert [f for f in found if f[1] not in valued] == []


def test_perf_page_lists_every_gpu_type_and_its_default_stack():
    gpus = json.loads((ROOT / "models" / "gpus.json").read_text())["gpus"]
    eff = json.loads((ROOT / "models" / "efficiency.json").read_text())
    text = (ROOT / "docs" / "perf.md").read_text()
    row = re.search(r"^\| `gpus.json` \| ([a-z0-9, ]+):", text, re.M).group(1)
    assert sorted(row.split(", ")) == sorted(gpus)
    for stack in set(eff["default_stack"].values()):
        m = re.search(rf"^\| {re.escape(stack)} \([^)]*\) \| ([a-z0-9, ]+) \|", text, re.M)
        assert m, stack
        assert sorted(m.group(1).split(", ")) == sorted(t for t, s in eff["default_stack"].items() if s == stack)
    for t in gpus:
        assert gpus[t]["source"].strip(), t
