"""How the SLO answer moves within the cost model's measured error.

The measured-kernel model (``cost/measured.py``) predicts real serving runs with a published
error (``benchmarks/measured_error.py``: median and p90 over TTFT and TPOT). Steps that run
slower than predicted need more GPUs to meet the same SLO, so the planner searches the
answer's own fleet kind (deployment, router, DRAM tier and store) again with every replica's
step cost scaled by ``1 + p90`` (its decode steps, whose time is TPOT, are off by at most that
for nine runs in ten) and reports the count that meets the SLO then beside the answer: "24 ×
H200, 32 if steps run 24% slower than predicted". Searching that kind alone keeps the range
to a bisection of one series; another kind could be cheaper at the slower steps, so the
figure is an upper bound of what the slower steps need. A faster-than-predicted fleet needs
no more than the answer, so only the slow side is searched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from prefixscope.analysis.cost.measured import error_pct
from prefixscope.analysis.plan.space import Replica


def slower_pct() -> float:
    """The measured model's p90 relative error of a step (TPOT), in %."""
    return float(error_pct()["tpot_p90"])


def slower(replicas: Sequence[Replica], pct: float) -> list[Replica]:
    """``replicas`` with every term of their step cost ``pct`` % slower (knees unchanged)."""
    k = 1.0 + pct / 100.0
    out = []
    for r in replicas:
        c = r.engine.cost
        cost = replace(c, a=c.a * k, b=c.b * k, c=c.c * k, e=c.e * k, f=c.f * k)
        out.append(replace(r, engine=replace(r.engine, cost=cost)))
    return out


def with_range(rows: list[dict], slow: list[dict], pct: float | None, source: str) -> list[dict]:
    """``rows`` (answers) with their cost source and, where a slower search ran, its cheapest
    fleet's GPUs and dollars for the same load scale and caching."""
    for row in rows:
        row["cost_model"] = source
        row["slower_pct"] = pct
        row["gpus_if_slower"] = None
        row["usd_per_hour_if_slower"] = None
        match = [
            s for s in slow
            if s["load_scale"] == row["load_scale"] and s["prefix_caching"] == row["prefix_caching"]
        ]  # fmt: skip
        if match and match[0]["met"]:
            row["gpus_if_slower"] = match[0]["gpus"]
            row["usd_per_hour_if_slower"] = match[0]["usd_per_hour"]
    return rows
