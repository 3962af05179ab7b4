"""Stage ``disagg``: the warehouse's trace through a disaggregated fleet (prefill replicas, a
link, decode replicas: ``analysis/fleet/disagg.py``) and through the colocated fleet of the
same GPUs → ``disagg_fleets``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.cost.choice import wants_calibration
from prefixscope.analysis.cost.deployment import (
    Deployment,
    MemorySplit,
    memory_split,
    parse_deployment,
)
from prefixscope.analysis.cost.resolved import ResolvesModel
from prefixscope.analysis.fleet.decode_pool import DecodePool
from prefixscope.analysis.fleet.disagg import DisaggOutcome, Link, link_for, simulate_disagg
from prefixscope.analysis.fleet.disagg_table import Layout, colocated_row, disagg_row, table
from prefixscope.analysis.fleet.engines import resolve_engine
from prefixscope.analysis.fleet.routers import RouterSettings, resolve_router
from prefixscope.analysis.fleet.run import (
    DEFAULT_BUDGET,
    DEFAULT_MAX_SEQS,
    MAX_REPLICAS,
    Engine,
    Fleet,
    FleetOutcome,
    simulate_fleet,
)
from prefixscope.analysis.fleet.stepcost import StepCost, choose
from prefixscope.analysis.fleet.traffic import load_traffic
from prefixscope.analysis.trace.load import load_trace
from prefixscope.stages.outcomes import calibrated


@dataclass(frozen=True)
class DisaggSettings(ResolvesModel):
    """``prefill_replicas`` of ``prefill`` (``GPU[xTP]``) feeding ``decode_replicas`` of
    ``decode`` over ``link`` (``rdma``, ``nvlink``, ``inf`` or GB/s), the prefill pool routed
    by ``router`` and keeping KV as ``engine`` does; ``colocated``: also the colocated fleet
    of as many GPUs (where the prefill deployment divides them)."""

    prefill: str | Deployment  # ``GPU[xTP]``, or as the command line parsed it
    prefill_replicas: int
    decode: str | Deployment
    decode_replicas: int
    router: str = "kv-aware"
    engine: str = "ideal"
    model: str = "llama-3-8b"
    model_config: str | None = None
    kv_dtype: str = "bf16"
    link: str = "rdma"
    load_scale: float = 1.0
    cost_model: str = "auto"
    budget_tokens: int = DEFAULT_BUDGET
    max_seqs: int = DEFAULT_MAX_SEQS
    seed: int = 0
    colocated: bool = True

    @cached_property
    def parsed(self) -> dict[str | Deployment, Deployment]:
        """The prefill and decode deployments as given → parsed, once per settings (a GPU file
        read once)."""
        return {d: parse_deployment(d) for d in (self.prefill, self.decode)}

    @property
    def gpus(self) -> int:
        return (
            self.prefill_replicas * self.parsed[self.prefill].tp
            + self.decode_replicas * self.parsed[self.decode].tp
        )

    def colocated_replicas(self) -> int | None:
        """Replicas of the prefill deployment on the same GPUs; None where they do not divide
        evenly or are more than a fleet takes."""
        tp = self.parsed[self.prefill].tp
        n, left = divmod(self.gpus, tp)
        return n if not left and n <= MAX_REPLICAS else None

    def the_link(self) -> Link:
        return link_for(self.link, self.parsed[self.prefill].gpu)

    def check(self) -> None:
        """Every name and number, each refusal one line, before the warehouse is opened."""
        resolve_router(self.router)
        resolve_engine(self.engine)
        self.shape  # noqa: B018 — a model that is not known is refused here
        for what, n in (("prefill", self.prefill_replicas), ("decode", self.decode_replicas)):
            if not 1 <= n <= MAX_REPLICAS:
                raise ValueError(f"{what} replicas must be 1 to {MAX_REPLICAS}, got {n}")
        for d in self.parsed.values():  # the model fits each deployment
            memory_split(self.shape, d, block_size=1, kv_dtype=self.kv_dtype)
        self.the_link().check()
        if not self.load_scale > 0:
            raise ValueError(f"the load scale must be positive, got {self.load_scale}")
        Engine(StepCost(0, 0, 0, 0, 0, 0, 0, "check"), self.budget_tokens, self.max_seqs).check()


@dataclass(frozen=True)
class DisaggResult:
    run_id: str
    rows: pa.Table
    disagg: DisaggOutcome
    colocated: FleetOutcome | None


def _split(settings: DisaggSettings, text: str | Deployment, block_size: int) -> MemorySplit:
    return memory_split(
        settings.shape, settings.parsed[text], block_size=block_size, kv_dtype=settings.kv_dtype
    )


def _cost(settings: DisaggSettings, text: str | Deployment, fitted) -> StepCost:  # type: ignore[no-untyped-def]
    d = settings.parsed[text]
    return choose(settings.shape, d.gpu, d.tp, fitted, settings.cost_model)


def simulate_disagg_fleets(wh: str | Path, settings: DisaggSettings) -> DisaggResult:
    settings.check()
    shape = settings.shape
    with warehouse.StageRun(wh, "disagg", settings) as stage_run:
        with stage_run.reading() as con:
            trace = load_trace(con)
            traffic = load_traffic(con)
            fitted = {
                text: calibrated(con, shape, d.gpu)
                if wants_calibration(settings.cost_model, d.tp)
                else None
                for text, d in settings.parsed.items()
            }
        pre_split = _split(settings, settings.prefill, trace.block_size)
        dec_split = _split(settings, settings.decode, trace.block_size)
        pre_cost = _cost(settings, settings.prefill, fitted[settings.prefill])
        dec_cost = _cost(settings, settings.decode, fitted[settings.decode])
        engine = Engine(
            pre_cost,
            settings.budget_tokens,
            settings.max_seqs,
            RouterSettings(seed=settings.seed),
            float(shape.kv_bytes_per_token(settings.kv_dtype)),
        )
        fleet = Fleet(
            settings.router,
            settings.prefill_replicas,
            pre_split.kv_pool_blocks,
            load_scale=settings.load_scale,
            engine=settings.engine,
        )
        pool = DecodePool(
            settings.decode_replicas,
            dec_split.kv_pool_blocks,
            trace.block_size,
            dec_cost,
            settings.max_seqs,
        )
        link = settings.the_link()
        per_gpu = max(pre_split.kv_bytes_per_token, dec_split.kv_bytes_per_token)
        outcome = simulate_disagg(trace, traffic, fleet, engine, pool, link, per_gpu)
        pre_dep, dec_dep = settings.parsed[settings.prefill], settings.parsed[settings.decode]
        sources = sorted({pre_cost.source, dec_cost.source})
        layout = Layout(
            pre_dep.name,
            settings.prefill_replicas,
            dec_dep.name,
            settings.decode_replicas,
            settings.gpus,
            settings.router,
            settings.engine,
            shape.name,
            settings.load_scale,
            "+".join(sources),
        )
        rows = [disagg_row(layout, outcome, link, trace.input_tokens)]
        together = settings.colocated_replicas() if settings.colocated else None
        co = None
        if together is not None:
            co = simulate_fleet(
                trace, traffic, Fleet(
                    settings.router, together, pre_split.kv_pool_blocks,
                    load_scale=settings.load_scale, engine=settings.engine,
                ), engine,
            )  # fmt: skip
            same = Layout(
                pre_dep.name, together, None, 0, settings.gpus, settings.router,
                settings.engine, shape.name, settings.load_scale, pre_cost.source,
            )  # fmt: skip
            rows.append(
                colocated_row(same, co, trace.input_tokens, np.asarray(traffic.output_tokens))
            )
        rows_table = table(rows)
        with stage_run.publishing() as con:
            warehouse.append(con, "disagg_fleets", rows_table, stage_run.run_id)
    return DisaggResult(stage_run.run_id, rows_table, outcome, co)
