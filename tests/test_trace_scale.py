"""What lets one process hold a 250 M-lookup trace once: the dense ids and tenant codes without
numpy's argsort, the per-tenant groups as positions, the recent stretch the fleet and the plan
measure, and the trace loaded once per process while the warehouse's requests stay the same."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope import warehouse
from prefixscope.analysis.trace import load
from prefixscope.analysis.trace.csr import build_trace, dense_ids, tenant_codes_of
from prefixscope.analysis.trace.measure import groups, index_groups
from prefixscope.analysis.trace.tail import span, tail, tail_start


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=300))
def test_dense_ids_name_each_distinct_value_once(values: list[int]) -> None:
    array = np.array(values, dtype=np.uint64)
    unique, dense = dense_ids(array)
    _check_dense(array, unique, dense)


def _check_dense(array: np.ndarray, unique: np.ndarray, dense: np.ndarray) -> None:
    """One id per distinct value, ``unique[id]`` its value; ids numbered by value where the
    values are small integers (counted), else by first lookup (ranked: hashes, keyed or not)."""
    assert dense.dtype == np.int32 and unique.dtype == np.uint64
    assert np.array_equal(unique[dense], array)
    assert len(unique) == len(np.unique(array))
    if len(array) == 0:
        return
    first = np.unique(dense, return_index=True)[1]
    by_lookup = np.array_equal(dense[np.sort(first)], np.arange(len(unique)))
    by_value = np.array_equal(unique, np.sort(unique))
    assert by_lookup or by_value


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["b", "a", "t10", "t9", "Z", "é", ""]), max_size=80))
def test_tenant_codes_are_numpys_unique_and_inverse(names: list[str]) -> None:
    got_names, codes = tenant_codes_of(names)
    expected_names, expected_codes = np.unique(np.array(names, dtype=str), return_inverse=True)
    assert got_names.tolist() == expected_names.tolist()
    assert np.array_equal(codes, expected_codes.ravel())


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=60))
def test_index_groups_hold_the_rows_of_the_masks_in_order(rows: list[tuple[int, bool]]) -> None:
    codes = np.array([c for c, _ in rows], dtype=np.int32)
    measured = np.array([m for _, m in rows], dtype=bool)
    tenants = ("a", "b", "c", "d")
    by_mask = [
        (name, np.flatnonzero(mask))
        for name, mask in groups(codes, tenants, measured)
    ]
    by_index = index_groups(codes, tenants, measured)
    assert [n for n, _ in by_index] == [n for n, _ in by_mask]
    for (_, a), (_, b) in zip(by_index, by_mask, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize(
    ("max_lookups", "first"),
    [(None, 0), (100, 0), (6, 0), (5, 1), (4, 2), (3, 2), (1, 3), (2, 3)],
)
def test_the_stretch_is_the_last_whole_requests_that_fit(max_lookups, first) -> None:  # type: ignore[no-untyped-def]
    # four requests of 1, 2, 1, 2 lookups
    trace = build_trace(
        [[5], [5, 7], [9], [5, 11]], [16, 32, 16, 32], ["x", "y", "x", "y"], 16, [0, 1, 3, 6]
    )
    assert tail_start(trace, max_lookups) == first
    recent = tail(trace, first)
    # within the bound, but never less than the last request
    assert recent.n_lookups <= max(max_lookups or trace.n_lookups, 2)
    assert recent.n_requests == trace.n_requests - first
    # the same blocks, renumbered; times from the stretch's first arrival
    lo = trace.offsets[first]
    assert np.array_equal(recent.hashes[recent.blocks], trace.hashes[trace.blocks][lo:])
    assert recent.times[0] == 0 and recent.start_s == trace.start_s + trace.times[first]
    assert recent.tenants == trace.tenants
    with pytest.raises(ValueError, match="at least one lookup"):
        tail_start(trace, 0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=5), min_size=1, max_size=12),
    st.data(),
)
def test_a_span_is_its_requests_numbered_by_first_lookup(requests, data) -> None:  # type: ignore[no-untyped-def]
    """Requests ``first .. end - 1`` with the same block at every lookup, ids 0.. in the order
    first looked up, and only the ids they look up (all of the trace: the trace itself); twice
    over, so that a table left behind by the first would show in the second."""
    n = len(requests)
    sizes = [16 * len(r) for r in requests]
    trace = build_trace(requests, sizes, ["t"] * n, 16, [float(i) for i in range(n)])
    for _ in range(2):
        first = data.draw(st.integers(0, n - 1))
        end = data.draw(st.integers(first + 1, n))
        part = span(trace, first, end)
        if (first, end) == (0, n):  # all of it: the trace itself, as numbered
            assert part is trace
            continue
        lo, hi = trace.offsets[first], trace.offsets[end]
        assert np.array_equal(part.hashes[part.blocks], trace.hashes[trace.blocks[lo:hi]])
        assert part.n_unique == len(np.unique(trace.blocks[lo:hi])) == len(part.hashes)
        firsts = np.unique(part.blocks, return_index=True)[1]
        assert np.array_equal(part.blocks[np.sort(firsts)], np.arange(part.n_unique))


def test_the_trace_is_loaded_once_while_the_requests_stay_the_same(
    bundled_warehouse, tmp_path
) -> None:
    import shutil

    from prefixscope.ingest import IngestOptions
    from prefixscope.stages import ingest

    wh = tmp_path / "wh.duckdb"
    shutil.copy(bundled_warehouse.path, wh)
    with warehouse.connect(wh, read_only=True) as con:
        first = load.load_trace(con)
    with warehouse.connect(wh, read_only=True) as con:
        assert load.load_trace(con) is first  # the same object: no second load
    log = tmp_path / "more.jsonl"
    line = '{"timestamp": 5, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]}'
    log.write_text(line + "\n")
    ingest.ingest_logs(wh, ingest.IngestSettings((str(log),), "mooncake", IngestOptions()))
    with warehouse.connect(wh, read_only=True) as con:
        grown = load.load_trace(con)
    assert grown is not first and grown.n_requests == first.n_requests + 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 400), max_size=300), st.integers(0, 2**40))
def test_small_integer_ids_are_counted_and_others_ranked_by_first_lookup(values, shift) -> None:
    """Ids within a few times their count of 0 (remapped hash-id logs) take the counting path,
    numbered by value as numpy's unique would; shifted far away, the same ids take polars'
    rank, numbered by first lookup. Either way each distinct value has one id."""
    for array in (np.array(values, np.uint64), np.array(values, np.uint64) + np.uint64(shift)):
        unique, dense = dense_ids(array)
        _check_dense(array, unique, dense)
    many = np.arange(300, dtype=np.uint64)[::-1]  # 300 ids below 300: counted, by value
    unique, dense = dense_ids(many)
    assert np.array_equal(unique, np.arange(300)) and np.array_equal(dense, many)


def test_a_trace_from_chunks_is_the_trace_from_one_array() -> None:
    """A query's hash lists arrive in chunks (sliced ones too); they are flattened chunk by
    chunk, with the same offsets and ids as from the combined array."""
    import pyarrow as pa

    lists = pa.array([[5, 6], [], [5, 7, 8], [9], [5, 6, 10]], pa.list_(pa.uint64()))
    chunked = pa.chunked_array([lists.slice(0, 2), lists.slice(2, 1), lists.slice(3)])
    args = ([8, 1, 12, 4, 12], ["a"] * 5, 4)
    one, parts = build_trace(lists, *args), build_trace(chunked, *args)
    assert parts.offsets.tolist() == one.offsets.tolist() == [0, 2, 2, 5, 6, 9]
    assert parts.blocks.tolist() == one.blocks.tolist()
    assert parts.hashes.tolist() == one.hashes.tolist() == [5, 6, 7, 8, 9, 10]
