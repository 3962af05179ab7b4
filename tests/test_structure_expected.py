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
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope import warehouse
from prefixscope.analysis.policies import POLICIES, PolicyOptions
from prefixscope.analysis.structure import attribution, prefixes, reuse, turns
from prefixscope.analysis.structure.log import RequestLog, load_log
from prefixscope.analysis.structure.scan import scan
from prefixscope.analysis.structure.tables import TABLES, StructureSettings, analyse
from prefixscope.analysis.structure.turns import LogIds
from prefixscope.analysis.trace.csr import Trace, build_trace
from prefixscope.analysis.trace.load import load_trace
from prefixscope.ingest import IngestOptions
from prefixscope.stages import ingest
from prefixscope.synthetic import Workload, write_bailian

EXPECTED = Path(__file__).parent / "data" / "structure"
SAMPLE = Path(__file__).resolve().parents[1] / "data/sample/mooncake/conversation_trace.jsonl.gz"
BS = 4
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
    # plain hashes: the rows were recorded with them (prefix_hash is a stored hash)
    if name == "bundled":
        options = IngestOptions(hash_key=None)
        ingest.ingest_logs(db, ingest.IngestSettings((str(SAMPLE),), "mooncake", options))
    else:
        path = write_bailian(folder / "log.jsonl", Workload(sessions=200), seed=7)
        options = IngestOptions(tenant_from="type", hash_key=None)
        ingest.ingest_logs(db, ingest.IngestSettings((str(path),), "bailian", options))
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
    for name, chosen in CASES.items():
        trace, log = load_case(name, folder)
        for table, rows in analyse(trace, log, chosen).items():
            pq.write_table(rows, EXPECTED / f"{name}.{table}.parquet", compression="zstd")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_expected(Path(tmp))
    print(f"wrote {len(list(EXPECTED.glob('*.parquet')))} files to {EXPECTED}", file=sys.stderr)


# --- each compiled pass against the sort-based definition it replaced ------------------------


@st.composite
def any_trace(draw) -> Trace:  # type: ignore[no-untyped-def]
    """Random requests over a few ids, chained or not (an id may follow several parents, sit
    at several depths or repeat within a request), with partial last blocks, two tenants."""
    n = draw(st.integers(1, 25))
    ids = draw(st.lists(st.lists(st.integers(0, 6), max_size=6), min_size=n, max_size=n))
    tokens = [max(len(r) * BS - draw(st.integers(0, BS - 1)), 1) for r in ids]
    tenants = draw(st.lists(st.sampled_from("ab"), min_size=n, max_size=n))
    times = np.cumsum(draw(st.lists(st.sampled_from([0.0, 0.05, 3.0, 700.0]), min_size=n,
                                    max_size=n)))  # fmt: skip
    return build_trace(ids, tokens, tenants, BS, times=times)


def _old_unique_pairs(trace: Trace, owner: np.ndarray, lookups: np.ndarray) -> np.ndarray:
    who = owner[trace.request_of_lookup[lookups]].astype(np.int64)
    pairs = np.unique(who * trace.n_unique + trace.blocks[lookups])
    return np.bincount(pairs % trace.n_unique, minlength=trace.n_unique)


def _old_forks(trace: Trace) -> np.ndarray:
    full = turns.full_blocks(trace)
    position = np.arange(trace.n_lookups) - trace.offsets[trace.request_of_lookup]
    child = np.flatnonzero((position > 0) & (position < full[trace.request_of_lookup]))
    pairs = np.unique(
        trace.blocks[child - 1].astype(np.int64) * trace.n_unique + trace.blocks[child]
    )
    return np.bincount(pairs // trace.n_unique, minlength=trace.n_unique)


def _old_own_history(trace: Trace, session: np.ndarray) -> np.ndarray:
    request = trace.request_of_lookup
    keys = np.asarray(session, np.int64)[request] * trace.n_unique + trace.blocks
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return request[first][inverse.ravel()] < request


@settings(max_examples=200, deadline=None)
@given(trace=any_trace(), sessions=st.integers(1, 4))
def test_the_passes_equal_the_sorts(trace: Trace, sessions: int) -> None:
    s = scan(trace)
    ceiling = POLICIES["ceiling"].replay(trace, None, PolicyOptions())
    assert s.ceiling.hit_blocks.tolist() == ceiling.hit_blocks.tolist()
    if len(trace.tenants) > 1:
        assert s.ceiling.cross.tolist() == ceiling.cross.tolist()
    assert s.parent.tolist() == trace.parent.tolist()
    position = np.arange(trace.n_lookups) - trace.offsets[trace.request_of_lookup]
    at_depth = np.zeros(trace.n_unique, np.int64)
    at_depth[trace.blocks] = position
    assert s.depth.tolist() == at_depth.tolist()
    every = np.arange(trace.n_lookups)
    requests = np.arange(trace.n_requests)
    assert s.requests.tolist() == _old_unique_pairs(trace, requests, every).tolist()
    assert s.forks.tolist() == _old_forks(trace).tolist()
    # Keys: equal exactly where (tenant, block) pairs are equal.
    pair = trace.tenant_codes[trace.request_of_lookup].astype(np.int64) * 99 + trace.blocks
    assert len(np.unique(s.key)) == len(np.unique(pair)) == len(np.unique(pair * 1000 + s.key))
    session = requests % sessions
    use = attribution.session_use(trace, session)
    assert use.sessions.tolist() == _old_unique_pairs(trace, session, every).tolist()
    assert use.earlier.tolist() == _old_own_history(trace, session).tolist()
    half = requests < trace.n_requests // 2
    measured = np.flatnonzero(half[trace.request_of_lookup])
    want = _old_unique_pairs(trace, session, measured).tolist()
    assert prefixes.distinct_users(trace, session, half).tolist() == want
    r = reuse.reuses(trace)
    counts, tokens = reuse.histogram(trace, trace.tenant_codes, len(trace.tenants))
    which = reuse.bin_of(r.gap_s)
    for code in range(len(trace.tenants)):
        mine = trace.tenant_codes[r.request] == code
        assert counts[code].tolist() == np.bincount(which[mine], minlength=counts.shape[1]).tolist()
        assert (
            tokens[code].tolist()
            == np.bincount(which[mine], weights=r.tokens[mine], minlength=counts.shape[1])
            .astype(np.int64)
            .tolist()
        )
    for outcome in (ceiling, POLICIES["lru"].replay(trace, 5, PolicyOptions())):
        cls = attribution.classify(trace, session, outcome)
        split = attribution.split_tokens(trace, session, outcome)
        for k in range(3):
            weights = np.where(cls == k, trace.served_sizes, 0)
            want_k = np.bincount(trace.request_of_lookup, weights=weights,
                                 minlength=trace.n_requests).astype(np.int64)  # fmt: skip
            assert split[:, k].tolist() == want_k.tolist()
