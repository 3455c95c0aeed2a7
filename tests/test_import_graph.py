"""The package's import graph has no circle, and docs/architecture.md lists every module.

Every import counts, those inside functions included: a lazy import that goes back up is a
circle all the same (it only moves the failure from import time to the first call).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "unicron_plan"


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package (a package is its __init__)."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def compiled(root: Path = ROOT) -> set[str]:
    """Dotted names of the package's compiled modules (one C file each): they import nothing."""
    return {".".join(p.relative_to(root).with_suffix("").parts) for p in (root / PACKAGE).rglob("*.c")}


def import_graph(mods: dict[str, Path], root: Path = ROOT) -> nx.DiGraph:
    """An edge a -> b when module a imports module b (``from pkg import sub`` names the submodule, a
    compiled one too)."""
    known = set(mods) | compiled(root)
    graph = nx.DiGraph()
    for name, path in mods.items():
        graph.add_node(name)
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[:len(here) - node.level + 1]
                    base = ".".join(here + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in known:  # import a.b.c of a module a.b: the edge is to a.b
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def test_the_import_graph_has_no_circle():
    graph = import_graph(modules())
    assert graph.number_of_edges() > 100  # the walk found the imports
    cycles = sorted((sorted(c) for c in nx.simple_cycles(graph)), key=len)
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles[:10])


def test_the_check_finds_a_circle_through_a_lazy_import(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from unicron_plan.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "sub" / "c.py").write_text("def g():\n    from unicron_plan.sub.a import f\n")
    cycles = list(nx.simple_cycles(import_graph(modules(tmp_path), tmp_path)))
    assert [sorted(c) for c in cycles] == [["unicron_plan.sub.a", "unicron_plan.sub.b", "unicron_plan.sub.c"]]


def test_architecture_doc_lists_every_module():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([\w/]+\.py)` \|", doc, re.M))  # the rows of "Every module"
    files = {str(p.relative_to(ROOT / PACKAGE)) for p in modules().values()}
    assert not files - listed, f"modules missing from docs/architecture.md: {sorted(files - listed)}"
    assert not listed - files, f"docs/architecture.md names files the package lacks: {sorted(listed - files)}"


WRITERS = {"write_text", "write_bytes", "savefig", "dump", "fdopen", "open"}


def _writes(path: Path) -> list[str]:
    """Calls in ``path`` that write a file: write_text/write_bytes/savefig/json.dump, and open or
    os.fdopen with a mode that writes."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name not in WRITERS:
            continue
        if name in ("open", "fdopen"):
            modes = [a.value for a in node.args[1:2] + [k.value for k in node.keywords if k.arg == "mode"]
                     if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not any(set(m) & set("wax+") for m in modes):
                continue
        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    return found


def test_every_file_write_goes_through_io():
    writes = [w for name, path in modules().items() if name != f"{PACKAGE}.io" for w in _writes(path)]
    assert not writes, "file writes outside io.py: " + "; ".join(writes)
    assert _writes(ROOT / PACKAGE / "io.py")  # the check sees io.py's own writes
