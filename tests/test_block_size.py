"""The block-size what-if: a trace coarsened to a larger block size is the trace its log gives
when ingested at that size, token sources and hash-id traces alike; never refined; side by
side in one table and on the page."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from prefixscope import warehouse
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.coarsen import coarsen
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.cli import main
from tests.test_report import tables


def token_log(path: Path, seed: int = 0) -> Path:
    """Conversations as token ids: system prompts shared by many, turns extending their
    conversation, lengths that fall on and off block boundaries."""
    rng = np.random.default_rng(seed)
    systems = [list(rng.integers(0, 50_000, int(rng.integers(20, 300)))) for _ in range(4)]
    lines, t = [], 0.0
    for s in range(60):
        prompt = list(systems[s % 4])
        for _ in range(int(rng.integers(1, 5))):
            prompt += list(rng.integers(0, 50_000, int(rng.integers(1, 200))))
            t += float(rng.exponential(2.0))
            ids = [int(x) for x in prompt]
            lines.append(json.dumps({"timestamp": round(t, 3), "token_ids": ids}))
    path.write_text("\n".join(lines) + "\n")
    return path


def mooncake_log(path: Path, step: int = 1, block_size: int = 512, seed: int = 1) -> Path:
    """Prefix-chained hash ids at ``block_size``; ``step`` keeps every step-th id (and the
    last), which is the same log at ``step`` times the block size."""
    rng = np.random.default_rng(seed)
    lines, fresh, chains = [], 1_000, []
    for i in range(300):
        chain = []
        if chains and rng.random() < 0.7:
            base = chains[int(rng.integers(0, len(chains)))]
            chain = base[: int(rng.integers(1, len(base) + 1))]
        grow = int(rng.integers(1, 6))
        chain = chain + list(range(fresh, fresh + grow))
        fresh += grow
        chains.append(chain)
        tokens = len(chain) * block_size - int(rng.integers(0, block_size))
        kept = chain[step - 1 :: step]
        if len(chain) % step:
            kept = kept + [chain[-1]]
        lines.append(
            json.dumps(
                {"timestamp": i * 100, "input_length": tokens, "output_length": 5, "hash_ids": kept}
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def ingested(log: Path, fmt: str, block_size: int, folder: Path) -> Trace:
    wh = folder / f"{fmt}-{block_size}.duckdb"
    argv = ["ingest", "--format", fmt, "--input", str(log), "--warehouse", str(wh)]
    assert main([*argv, "--block-size", str(block_size)]) == 0
    with warehouse.connect(wh, read_only=True) as con:
        return load_trace(con)


def same_prefixes(a: Trace, b: Trace) -> None:
    """The same requests with the same classes of equal blocks (ids may differ)."""
    np.testing.assert_array_equal(a.offsets, b.offsets)
    pairs = set(zip(a.blocks.tolist(), b.blocks.tolist(), strict=True))
    assert len(pairs) == a.n_unique == b.n_unique  # a bijection between their block ids


@pytest.mark.parametrize("size", [32, 64, 128])
def test_a_token_source_coarsened_is_the_log_hashed_at_that_size(tmp_path, size) -> None:
    log = token_log(tmp_path / "tokens.jsonl")
    fine = ingested(log, "tokens", 16, tmp_path)
    direct = ingested(log, "tokens", size, tmp_path)
    coarse = coarsen(fine, size)
    assert coarse.block_size == size
    same_prefixes(coarse, direct)
    for capacity in (5, 40, 10_000):
        lru = POLICIES["lru"]
        np.testing.assert_array_equal(
            hit_tokens(coarse, lru.hit_blocks(coarse, capacity)),
            hit_tokens(direct, lru.hit_blocks(direct, capacity)),
        )
    assert direct.recomputes_last_block.any()  # the last-token rule is at play


@pytest.mark.parametrize("step", [2, 3])
def test_a_hash_id_trace_coarsened_is_its_log_at_whole_multiples(tmp_path, step) -> None:
    fine = ingested(mooncake_log(tmp_path / "fine.jsonl"), "mooncake", 512, tmp_path)
    coarse_log = mooncake_log(tmp_path / "coarse.jsonl", step=step)
    direct = ingested(coarse_log, "mooncake", 512 * step, tmp_path)
    same_prefixes(coarsen(fine, 512 * step), direct)


@pytest.mark.parametrize("size", [8, 24, 1000])
def test_a_block_size_that_is_no_whole_multiple_is_refused(tmp_path, capsys, size) -> None:
    log = token_log(tmp_path / "tokens.jsonl")
    wh = tmp_path / "wh.duckdb"
    assert main(["ingest", "--format", "tokens", "--input", str(log), "--warehouse", str(wh)]) == 0
    argv = ["simulate", "--warehouse", str(wh), "--policy", "lru", "--capacity-tokens", "4096"]
    assert main([*argv, "--block-size", str(size)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "whole" in err and f"--block-size {size}" in err


def test_block_sizes_go_side_by_side_in_one_table_and_on_the_page(tmp_path) -> None:
    log = token_log(tmp_path / "tokens.jsonl")
    wh = tmp_path / "wh.duckdb"
    assert main(["ingest", "--format", "tokens", "--input", str(log), "--warehouse", str(wh)]) == 0
    argv = ["simulate", "--warehouse", str(wh), "--policy", "ceiling,lru"]
    assert main([*argv, "--capacity-blocks", "64,512", "--block-size", "16,32,64,128"]) == 0
    with duckdb.connect(str(wh), read_only=True) as con:
        rows = con.execute(
            "SELECT block_size, capacity_tokens, token_hit_rate FROM latest_hit_rates "
            "WHERE tenant = '*' AND policy = 'lru' AND measure_window = 'all' ORDER BY 2, 1"
        ).fetchall()
    assert [r[0] for r in rows] == [16, 32, 64, 128] * 2
    assert {r[1] for r in rows} == {64 * 16, 512 * 16}  # the same memory at every size
    for capacity in (64 * 16, 512 * 16):
        rates = [r[2] for r in rows if r[1] == capacity]
        assert rates == sorted(rates, reverse=True)  # larger blocks are reused less
        assert rates[0] > rates[-1]
    page = tmp_path / "report.html"
    assert main(["report", "--warehouse", str(wh), "--out", str(page)]) == 0
    html = page.read_text()
    table = tables(html)["block-size-table"]
    assert table.columns[-1] == "128-token blocks"
    assert [r[0] for r in table.rows].count("lru") == 2
