"""Package boundaries: torch stays optional, Prefect stays in pipelines."""

from __future__ import annotations

import ast
import subprocess
import sys
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
        "import sys, prefixscope.ingest, prefixscope.analysis.simulate, prefixscope.dashboards, "
        "prefixscope.cli; print(sorted({'torch', 'prefect'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


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
