"""The six structure tables, row for row, against tables written before the compiled rewrite
(``tests/data/structure/``): the bundled hour, and a synthetic four-tenant log whose requests
carry Bailian chat ids, session ids or nothing, a third each.

The expected files were written by the implementation of 2026-12-01 (commit 639b6c8) with
``.venv/bin/python -m tests.test_structure_expected``; rewrite them only for a change that is
meant to move a figure, and say so in the commit."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prefixscope import warehouse
from prefixscope.analysis.structure.log import RequestLog, load_log
from prefixscope.analysis.structure.tables import TABLES, StructureSettings, analyse
from prefixscope.analysis.structure.turns import LogIds
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.load import load_trace
from prefixscope.ingest import IngestOptions
from prefixscope.stages import ingest
from prefixscope.synthetic import Workload, write_bailian

EXPECTED = Path(__file__).parent / "data" / "structure"
SAMPLE = Path(__file__).resolve().parents[1] / "data/sample/mooncake/conversation_trace.jsonl.gz"
CASES = {
    "bundled": StructureSettings(),
    "mixed_log": StructureSettings(capacity_blocks=3_000, simulate_top=3),
}


def mixed_log(log: RequestLog) -> RequestLog:
    """The log with each Bailian conversation kept as chat ids, turned into a session id
    column, or dropped (by its first chat id modulo 3); request types on every other row."""
    ids = log.ids
    n = len(ids.chat_id)
    root = ids.chat_id.copy()
    row_of = {int(c): i for i, c in enumerate(ids.chat_id)}
    for i in range(n):  # parents come first
        if ids.parent_chat_id[i] >= 0:
            root[i] = root[row_of[int(ids.parent_chat_id[i])]]
    way = root % 3
    keep = way == 0
    names, codes = np.unique(root[way == 1], return_inverse=True)
    session = np.full(n, -1, np.int64)
    session[way == 1] = codes
    mixed = LogIds(
        chat_id=np.where(keep, ids.chat_id, -2),
        parent_chat_id=np.where(keep, ids.parent_chat_id, -2),
        turn=np.where(keep, ids.turn, 0).astype(np.int32),
        session=session,
    )
    kinds = np.array([("text", "search")[i % 4 // 2] if i % 2 else None for i in range(n)])
    return RequestLog(mixed, tuple(f"s{r}" for r in names), kinds.astype(object))


def load_case(name: str, folder: Path) -> tuple[Trace, RequestLog]:
    db = folder / f"{name}.duckdb"
    if name == "bundled":
        ingest.run(db, ingest.IngestSettings((str(SAMPLE),), "mooncake"))
    else:
        path = write_bailian(folder / "log.jsonl", Workload(sessions=200), seed=7)
        options = IngestOptions(tenant_from="type")
        ingest.run(db, ingest.IngestSettings((str(path),), "bailian", options))
    with warehouse.connect(db, read_only=True) as con:
        trace = load_trace(con)
        log = load_log(con, trace)
    return trace, (log if name == "bundled" else mixed_log(log))


@pytest.fixture(scope="module", params=list(CASES))
def computed(request, tmp_path_factory) -> tuple[str, dict[str, pa.Table]]:  # type: ignore[no-untyped-def]
    name = request.param
    trace, log = load_case(name, tmp_path_factory.mktemp(name))
    return name, analyse(trace, log, CASES[name])


@pytest.mark.parametrize("table", TABLES)
def test_every_row_is_as_before(computed, table: str) -> None:  # type: ignore[no-untyped-def]
    name, tables = computed
    want = pq.read_table(EXPECTED / f"{name}.{table}.parquet")
    got = tables[table]
    assert got.schema.equals(want.schema)
    assert got.num_rows == want.num_rows
    for column in want.column_names:
        a, b = got.column(column).combine_chunks(), want.column(column).combine_chunks()
        if not a.equals(b):
            first = next(i for i in range(len(a)) if a[i] != b[i])
            pytest.fail(f"{name}.{table}.{column} row {first}: {a[first]} != {b[first]}")


def write_expected(folder: Path) -> None:
    EXPECTED.mkdir(parents=True, exist_ok=True)
    for name, settings in CASES.items():
        trace, log = load_case(name, folder)
        for table, rows in analyse(trace, log, settings).items():
            pq.write_table(rows, EXPECTED / f"{name}.{table}.parquet", compression="zstd")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_expected(Path(tmp))
    print(f"wrote {len(list(EXPECTED.glob('*.parquet')))} files to {EXPECTED}", file=sys.stderr)
