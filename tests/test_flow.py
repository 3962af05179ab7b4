"""The fleet_report flow's own files. The flow itself runs on the bundled trace in
``tests/test_dask.py`` (on a Dask cluster) and in the demo (``conftest.demo_run``)."""

from __future__ import annotations

from pathlib import Path


def test_the_synthetic_logs_name_holds_no_tenant_name(tmp_path: Path) -> None:
    """A tenant name may hold ``/`` or be 64 characters long; the synthetic log beside the
    warehouse is named by a digest of them, so the flow never fails on its file name (after
    its first ingest has committed) and two tenant lists never share a file."""
    from prefixscope.pipelines.fleet_report import synthesize

    wh = str(tmp_path / "wh.duckdb")
    one = Path(synthesize.fn(wh, ["team/a", "x" * 64], 512))
    two = Path(synthesize.fn(wh, ["team", "a"], 512))
    assert one.parent == two.parent == tmp_path and one != two
    assert one.stat().st_size > 0 and two.stat().st_size > 0
