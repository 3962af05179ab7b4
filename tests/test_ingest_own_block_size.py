"""A Mooncake line that says its own ``block_size`` (as ``prefixscope export`` writes every
line, and the KVCache.AI simulator's traces do): without ``--block-size`` the first line's is the
ingest's, a line that says another is refused with its reason, and the counts add up."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from prefixscope.cli import main


def line(block_size: object, input_length: int = 40, **extra: object) -> str:
    """A line of ``input_length`` tokens whose ids count blocks of 16 (3 ids for 40 tokens)."""
    ids = list(range(-(-input_length // 16)))
    body = {"timestamp": 0, "input_length": input_length, "output_length": 5, "hash_ids": ids}
    if block_size is not ...:
        body["block_size"] = block_size
    return json.dumps({**body, **extra})


#: The first line's 16 wins; 32 and "16" (not a number) are refused, null and no field pass.
MIXED = [line(16), line(32), line("16"), line(None), line(...)]


def ingest(tmp_path: Path, write_lines, lines: list[str], *flags: str) -> tuple[int, Path]:  # noqa: ANN001
    wh = tmp_path / "wh.duckdb"
    status = main(["ingest", "--format", "mooncake", "--input", str(write_lines(lines)),
                   "--warehouse", str(wh), *flags])  # fmt: skip
    return status, wh


def table(wh: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.mark.parametrize(
    ("lines", "flags", "accepted", "rejected"),
    [
        # every line says 16: read at 16 without the flag
        ([line(16)] * 3, (), 3, []),
        # the flag agrees
        ([line(16)] * 3, ("--block-size", "16"), 3, []),
        # lines of another size among them
        (
            [line(16), line(32), line("16"), line(None), line(...)],
            (),
            3,
            ["block_size_mismatch"] * 2,
        ),
    ],
)
def test_a_lines_own_block_size_is_read_and_another_is_refused(
    tmp_path: Path,
    write_lines,
    lines: list[str],
    flags: tuple,
    accepted: int,
    rejected: list,  # noqa: ANN001
) -> None:
    status, wh = ingest(tmp_path, write_lines, lines, *flags)
    rows = table(wh, "SELECT block_size FROM requests")
    reasons = [r[0] for r in table(wh, "SELECT reason FROM rejects ORDER BY source.line")]
    assert len(rows) == accepted and reasons == rejected
    assert len(rows) + len(reasons) == len(lines)
    assert {r[0] for r in rows} == {16} and status == 0


def test_a_file_whose_lines_disagree_with_the_flag_is_refused(
    tmp_path: Path,
    write_lines,
    capsys,  # noqa: ANN001
) -> None:
    """Every line says 16, the flag 512: the file is refused in one line that names the block
    size (not the block count it breaks as a consequence), and nothing is written."""
    status, wh = ingest(tmp_path, write_lines, [line(16)] * 3, "--block-size", "512")
    err = capsys.readouterr().err
    assert status == 2 and not wh.exists()
    assert "block_size_mismatch" in err and "says block_size 16" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_export_of_full_blocks_reads_back_without_flags(tmp_path: Path, write_lines) -> None:  # noqa: ANN001
    """A token source's export names full blocks only and says so on each line
    (``last_token_rule``): read back as ``--full-blocks`` would, at the line's block size."""
    lines = [line(16, input_length=40 + k, last_token_rule=True) for k in range(3)]
    lines = [json.dumps({**json.loads(x), "hash_ids": [1, 2]}) for x in lines]  # floor(40/16)
    status, wh = ingest(tmp_path, write_lines, lines)
    assert status == 0
    assert table(wh, "SELECT DISTINCT block_size, last_token_rule FROM requests") == [(16, True)]
