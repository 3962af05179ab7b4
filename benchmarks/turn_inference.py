"""Turn inference against known truth: precision and recall of inferred parent links on
synthetic Bailian logs (several seeds and rule settings) and on the Bailian sample.

.venv/bin/python benchmarks/turn_inference.py
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

from prefixscope import warehouse
from prefixscope.analysis.structure import turns
from prefixscope.analysis.structure.log import load_log
from prefixscope.analysis.trace.load import load_trace
from prefixscope.ingest import IngestOptions
from prefixscope.stages import ingest
from prefixscope.synthetic import Workload, write_bailian

SAMPLE = Path(__file__).resolve().parents[1] / "data/sample/formats/bailian.jsonl"


def accuracy(path: Path, tmp: Path, max_forks: int, block_size: int) -> tuple[int, int, int]:
    db = tmp / f"{path.stem}-{max_forks}.duckdb"
    options = IngestOptions(tenant_from="type", block_size=block_size)
    ingest.ingest_logs(db, ingest.IngestSettings((str(path),), "bailian", options))
    with warehouse.reading(db) as con:
        trace = load_trace(con)
        truth = turns.logged_parents(load_log(con, trace).ids)
    guessed, _ = turns.infer_parents(trace, max_forks)
    return turns.link_accuracy(truth, guessed)


def line(name: str, counts: tuple[int, int, int]) -> str:
    true_n, guess_n, both = counts
    p = both / guess_n if guess_n else float("nan")
    r = both / true_n if true_n else float("nan")
    return (
        f"{name:<56} links {true_n:>6,}  inferred {guess_n:>6,}  precision {p:.3f}  recall {r:.3f}"
    )


def main() -> None:
    base = Workload()
    cases = {
        "default workload": base,
        "no edits": replace(base, edit_share=0.0),
        "20% edited turns": replace(base, edit_share=0.2),
        "one tenant, one system prompt": replace(base, tenants=("text",), prompts_per_tenant=1),
        "long first messages": replace(base, message_tokens=(64, 800)),
        "no common first messages": replace(base, common_first_share=0.0),
        "half the sessions open alike": replace(base, common_first_share=0.5),
        "block size 512, 8x longer texts": replace(
            base,
            block_size=512,
            preamble_tokens=200,
            prompt_tokens=(32, 9600),
            message_tokens=(32, 3200),
            answer_tokens=(80, 4000),
        ),
        "2,000 sessions": replace(base, sessions=2_000),
    }
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, w in cases.items():
            for forks in (1, 2, 4):
                total = [0, 0, 0]
                for seed in range(3):
                    path = write_bailian(tmp / f"{abs(hash(name))}-{seed}.jsonl", w, seed)
                    for i, v in enumerate(accuracy(path, tmp, forks, w.block_size)):
                        total[i] += v
                print(line(f"{name}, max_forks={forks} (3 seeds)", tuple(total)))
        t = time.perf_counter()
        print(line("data/sample/formats/bailian.jsonl", accuracy(SAMPLE, tmp, 1, 16)))
        print(f"({time.perf_counter() - t:.2f} s)")


if __name__ == "__main__":
    main()
