"""Package boundaries: torch stays optional, Prefect stays in pipelines, the analysis
sub-packages depend on each other in data-flow order, no module imports itself back through
others, and no module or folder outgrows the rest."""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "prefixscope"


def imported_roots(folder: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(PACKAGE)))
    return found


@pytest.mark.parametrize("sub", ["ingest", "analysis", "dashboards"])
def test_torch_is_never_imported_outside_gpu_replay(sub: str) -> None:
    assert "torch" not in imported_roots(PACKAGE / sub)


def test_only_pipelines_import_prefect() -> None:
    users = imported_roots(PACKAGE).get("prefect", set())
    assert users and all(u.startswith("pipelines/") for u in users)


def test_the_analysis_stages_load_without_torch_or_prefect() -> None:
    code = (
        "import sys, prefixscope.ingest, prefixscope.analysis.simulation.grid, "
        "prefixscope.analysis.curves.compute, prefixscope.analysis.structure.tables, "
        "prefixscope.stages.ingest, prefixscope.stages.simulate, prefixscope.stages.curve, "
        "prefixscope.stages.structure, prefixscope.stages.savings, prefixscope.stages.replay, "
        "prefixscope.stages.report, prefixscope.dashboards, prefixscope.cli; "
        "print(sorted({'torch', 'prefect'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow  # a fresh interpreter that imports torch
def test_the_gpu_bench_needs_only_torch_and_numpy() -> None:
    """The benchmark runs on a machine with torch and numpy and none of the warehouse's
    dependencies, so nothing it imports may pull them in."""
    pytest.importorskip("torch")
    code = (
        "import sys, prefixscope.gpu_replay.bench; "
        "print(sorted({'duckdb', 'polars', 'pyarrow', 'prefect', 'plotly', 'numba', 'scipy'}"
        " & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- the module import graph ------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _owner(name: str) -> str | None:
    """The module of ``prefixscope`` that ``name`` (a module or a name in one) is in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


@cache
def import_graph() -> dict[str, frozenset[str]]:
    """Per module of ``prefixscope``, the modules of ``prefixscope`` it imports, wherever the
    import statement is (module level or inside a function)."""
    graph: dict[str, frozenset[str]] = {}
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found |= {_owner(a.name) for a in node.names if a.name.startswith("prefixscope")}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                if not base.startswith("prefixscope"):
                    continue
                for alias in node.names:  # `from pkg import submodule` imports the submodule
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in MODULES else _owner(base))
        graph[name] = frozenset(m for m in found if m and m != name)
    return graph


def test_the_import_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    # module level, `from package import module`, and an import inside a function
    assert "prefixscope.analysis.trace.csr" in graph["prefixscope.analysis.trace.load"]
    assert "prefixscope.stages.curve" in graph["prefixscope.cli.curve"]
    assert "prefixscope.pipelines.fleet_report" in graph["prefixscope.cli.flows"]


def strongly_connected(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_back_through_others() -> None:
    # A package's __init__ that re-exports its own submodules is not a cycle: drop the edges
    # from an __init__ to the modules inside its package.
    graph = {
        m: frozenset(
            d for d in deps if not (MODULES[m].name == "__init__.py" and d.startswith(f"{m}."))
        )
        for m, deps in import_graph().items()
    }
    assert [part for part in strongly_connected(graph) if len(part) > 1] == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}
    assert sorted(map(tuple, strongly_connected(graph))) == [("a", "b", "c"), ("d",)]


# --- which part may import which ----------------------------------------------------------------

ANALYSIS = "prefixscope.analysis"
#: Per part of ``analysis``, the other parts it may import. In data-flow order the core is
#: trace ← policies ← structure ← simulation ← curves (each may import the ones before it);
#: ``cost`` (pricing, KV sizes of models) reads traces only and may be imported by any part;
#: ``fleet`` (replicas behind a router) reads traces, the turns ``structure`` finds (whose
#: answers the engines' pools cache), prices steps with ``cost`` and takes its capacities in
#: the form ``simulation`` resolves them (``simulation/capacities.py``); ``plan``
#: (the capacity planner) reads curves, prices with ``cost`` and simulates fleets (the SLO
#: search, its rounds fanned out on workers kept from round to round: ``fanout``, ``forked``);
#: ``validate`` (the simulator against the engines' reported hits) reads curves and runs
#: policies;
#: ``fanout`` imports nothing of ``analysis`` but ``forked`` (its workers here), which imports
#: nothing.
MAY_IMPORT = {
    "trace": set(),
    "policies": {"trace"},
    "structure": {"trace", "policies"},
    "simulation": {"trace", "policies", "structure", "cost", "fanout"},
    "curves": {"trace", "policies", "structure", "simulation", "cost", "fanout"},
    "cost": {"trace"},
    "fleet": {"trace", "policies", "structure", "simulation", "cost", "fanout"},
    "plan": {"trace", "policies", "curves", "cost", "fleet", "fanout", "forked"},
    "validate": {"trace", "policies", "curves"},
    "fanout": {"forked"},
    "forked": set(),
}


def part_of(module: str, root: str) -> str | None:
    """The first component of ``module`` below ``root`` (None: the root itself, or outside)."""
    if not module.startswith(f"{root}."):
        return None
    return module[len(root) + 1 :].split(".")[0]


def test_every_part_of_analysis_has_a_rule() -> None:
    parts = {part_of(m, ANALYSIS) for m in MODULES} - {None}
    assert parts == set(MAY_IMPORT)


def test_the_analysis_parts_depend_on_each_other_in_data_flow_order() -> None:
    wrong = sorted(
        (m, d)
        for m, deps in import_graph().items()
        if (part := part_of(m, ANALYSIS))
        for d in deps
        if (used := part_of(d, ANALYSIS)) and used != part and used not in MAY_IMPORT[part]
    )
    assert wrong == []


@pytest.mark.parametrize(
    ("importer", "forbidden"),
    [
        ("analysis", {"stages", "cli", "pipelines", "dashboards", "warehouse"}),
        ("stages", {"cli", "pipelines"}),
        ("dashboards", {"stages"}),
    ],
)
def test_lower_layers_never_import_higher_ones(importer: str, forbidden: set[str]) -> None:
    wrong = sorted(
        (m, d)
        for m, deps in import_graph().items()
        if part_of(m, "prefixscope") == importer
        for d in deps
        if part_of(d, "prefixscope") in forbidden
    )
    assert wrong == []


# --- sizes ------------------------------------------------------------------------------------

MAX_MODULE_LINES = 400


def non_blank_lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def test_no_module_is_over_400_non_blank_lines() -> None:
    sizes = {str(p.relative_to(PACKAGE)): non_blank_lines(p) for p in MODULES.values()}
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_no_folder_holds_more_than_a_third_of_the_package() -> None:
    per_folder: dict[str, int] = {}
    for path in MODULES.values():  # the modules directly in each folder
        folder = str(path.parent.relative_to(PACKAGE.parent))
        per_folder[folder] = per_folder.get(folder, 0) + non_blank_lines(path)
    total = sum(per_folder.values())
    assert len(per_folder) > 3 and total > 0
    assert {f: n for f, n in per_folder.items() if 3 * n > total} == {}
