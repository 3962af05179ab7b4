"""Readers are not locked out: a reader querying the views in a loop while two ingests and a
simulate run through the command line never fails, and sees whole runs only."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

READER = textwrap.dedent(
    """
    import json, sys, time
    from prefixscope import warehouse
    path, stop = sys.argv[1], sys.argv[2]
    warehouse.LOCK_TIMEOUT_S = 120
    seen, queries = {}, 0
    import os
    while not os.path.exists(stop):
        with warehouse.connect(path, read_only=True) as con:
            con.execute("SELECT count(*) FROM latest_hit_rates").fetchall()
            for run_id, n in con.execute(
                "SELECT r.run_id, count(h.run_id) FROM runs r LEFT JOIN hit_rates h "
                "USING (run_id) WHERE r.command = 'simulate' GROUP BY ALL"
            ).fetchall():
                seen.setdefault(run_id, set()).add(n)
        queries += 1
    print(json.dumps({"queries": queries, "seen": {k: sorted(v) for k, v in seen.items()}}))
    """
)


def mooncake_log(path: Path, lines: int) -> Path:
    """``lines`` Mooncake requests, each of three fresh blocks."""
    line = (
        '{{"timestamp": {0}, "input_length": 1500, "output_length": 5, '
        '"hash_ids": [{0}, {1}, {2}]}}'
    )
    path.write_text("\n".join(line.format(i, i + 1, i + 2) for i in range(lines)) + "\n")
    return path


@pytest.mark.slow
def test_a_reader_never_fails_and_sees_whole_runs(tmp_path: Path, bundled_warehouse) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(wh), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    inputs = [mooncake_log(tmp_path / f"in{i}.jsonl", 100_000 * (i + 1)) for i in range(2)]
    cli = [sys.executable, "-m", "prefixscope.cli"]
    writers = [
        subprocess.Popen(
            [*cli, "ingest", "--format", "mooncake", "--input", str(f), "--warehouse", str(wh)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for f in inputs
    ]
    writers.append(
        subprocess.Popen(
            [
                *cli,
                "simulate",
                "--warehouse",
                str(wh),
                "--policy",
                "lru,fifo",
                "--capacity-blocks",
                "1000,4000,16000",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
    )
    for w in writers:
        _, err = w.communicate(timeout=240)
        assert w.returncode == 0, err
    stop.touch()
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    assert "Traceback" not in err
    report = json.loads(out)
    assert report["queries"] > 0
    with duckdb.connect(str(wh), read_only=True) as con:
        full = dict(
            con.execute("SELECT run_id, count(*) FROM hit_rates GROUP BY run_id").fetchall()
        )
        statuses = [s for (s,) in con.execute("SELECT status FROM runs").fetchall()]
    assert set(statuses) == {"succeeded"}
    for run_id, counts in report["seen"].items():
        assert set(counts) <= {0, full.get(run_id, 0)}, (run_id, counts)
