"""A re-run resumes: the ``fleet_report`` flow run again after a failure reuses the stages that
finished on the same input and settings, and runs the rest.

Every stage the flow runs records its step in its ``runs`` row (``parameters.flow_step``:
``KEY:N``, the N-th step of the flow whose inputs and parameters fingerprint to ``KEY``,
:func:`fingerprint`). A run of the same flow finds the steps that succeeded since that
flow's latest first step (its ingest) and reuses them from the first step on, as long as each
step before was reused: once a step runs again, every later one does. Where another ingest
succeeded since, the warehouse no longer holds what those steps were computed on, and every
step runs again. ``--fresh`` runs every step.

The fingerprint covers each input file's resolved path, size and modification time, and every
parameter of the flow: a log that grew, or another flag, is another flow.

What the flow reads back from a reused step is read from the warehouse, by the run id of the
step it reuses (``fleet_report.py``): the counts of an ingest from ``sources``, a simulation's
hit rates from ``hit_rates``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb

from prefixscope import warehouse
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.runs import FLOW_STEP
from prefixscope.runs import flow_step as step  # noqa: F401  (the flow records its steps so)

#: The key the step is recorded under in a run's parameters (``runs.FLOW_STEP``).
FIELD = FLOW_STEP


def fingerprint(paths: Sequence[str], parameters: dict[str, object]) -> str:
    """The flow's key: its parameters (as JSON) and each input's resolved path, size and
    modification time. Files are not read: a week's log is gigabytes."""
    h = hashlib.sha256(json.dumps(parameters, sort_keys=True, default=str).encode())
    for path in paths:
        st = os.stat(path)
        h.update(f"\0{Path(path).resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def finished(wh: str | Path, key: str) -> dict[str, str]:
    """Step → run id of the steps of flow ``key`` that can be reused: those that succeeded
    since its latest first step (its ingest) succeeded; none when another ingest succeeded since
    (the warehouse no longer holds what they were computed on)."""
    if not Path(wh).exists():
        return {}
    try:
        with warehouse.reading(wh) as con:
            rows = con.execute(
                "WITH steps AS (SELECT *, json_extract_string(parameters, '$.' || ?) AS step "
                "FROM runs WHERE status = 'succeeded') "
                "SELECT run_id, command, step FROM steps WHERE started_at >= "
                "(SELECT max(started_at) FROM steps WHERE step = ?) ORDER BY started_at, run_id",
                [FIELD, f"{key}:0"],
            ).fetchall()
    except (duckdb.Error, warehouse.WarehouseError):
        return {}  # a warehouse of another version, or none: nothing to reuse
    out: dict[str, str] = {}
    for run_id, command, name in rows:
        ours = name is not None and name.startswith(f"{key}:")
        if command == "ingest" and not ours:
            return {}
        if ours:
            out[name] = run_id
    return out


#: Flow parameters that change no stage's results, left out of the key: a run that failed for
#: memory, run again with ``--workers 1`` or on a cluster, resumes; where the page and the
#: metrics go is the always-run steps' business.
NOT_IN_KEY = frozenset({"workers", "dask_address", "report_path", "metrics_path", "fresh"})


@dataclass(frozen=True)
class Counts:
    """What the flow says of an ingest it reused: its lines, accepted and rejected."""

    lines: int
    accepted: int
    rejected: int


def ingest_counts(wh: str | Path, run_id: str) -> Counts:
    """The counts of the ingest run ``run_id``, from the sources it wrote."""
    with warehouse.reading(wh) as con:
        row = con.execute(
            "SELECT coalesce(sum(lines), 0), coalesce(sum(accepted), 0), "
            "coalesce(sum(rejected), 0) FROM sources WHERE ingest_run_id = ?",
            [run_id],
        ).fetchone()
    assert row is not None
    return Counts(int(row[0]), int(row[1]), int(row[2]))


def fleet_hit_rates(wh: str | Path, run_id: str) -> list[dict]:
    """The fleet's rows of ``hit_rates`` that the simulate run ``run_id`` wrote."""
    with warehouse.reading(wh) as con:
        rows = con.sql(
            "SELECT * EXCLUDE (run_id) FROM hit_rates WHERE run_id = $run AND tenant = $fleet",
            params={"run": run_id, "fleet": FLEET},
        )
        return rows.to_arrow_table().to_pylist()
