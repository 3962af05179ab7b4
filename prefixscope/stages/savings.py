"""Stage ``savings``: one configuration's ``request_outcomes`` priced with a prefill cost model
on a deployment → ``savings`` (prefill GPU-seconds, their dollars, and TTFT with and without the
cache, per tenant).

The deployment (``GPU[xTP]``; default: the fewest GPUs of ``gpu`` that hold the model) bounds
what is priced: its KV pool, in the trace's blocks, is the largest cache it can keep, so only a
configuration at most that large is priced as that GPU, and a prefill runs on its TP GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.cost.choice import check_kind, wants_calibration
from prefixscope.analysis.cost.deployment import Deployment, fitting, parse_deployment
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.prices import Prices
from prefixscope.analysis.cost.resolved import ResolvesGpu, ResolvesModel, ResolvesPrices
from prefixscope.analysis.cost.savings import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    cost_model,
    savings_table,
)
from prefixscope.analysis.fleet.hardware import Hardware, of_deployment
from prefixscope.analysis.trace.load import block_size_of
from prefixscope.stages.outcomes import calibrated, choose_configuration, load_outcomes


@dataclass(frozen=True)
class SavingsSettings(ResolvesModel, ResolvesGpu, ResolvesPrices):
    """The model and GPU that price a miss, the cost model (``cost/choice.py``; auto:
    calibrated when the warehouse holds one, else the measured model where it covers, else the
    roofline), and which configuration's outcomes (default: the only one of the newest run that
    the deployment holds)."""

    model: str = DEFAULT_MODEL
    #: A name, a GPU file or ``cpu``, or the spec the command line resolved it to.
    gpu: str | GpuSpec = DEFAULT_GPU
    cost_model: str = "auto"
    outcomes_run: str | None = None
    policy: str | None = None
    capacity_blocks: int | None = None
    isolation: str | None = None
    #: A config.json whose shape ``model`` names (``resolve_model``).
    model_config: str | None = None
    #: ``GPU[xTP]`` (or the deployment the command line parsed) whose KV pool bounds the
    #: capacity priced and whose GPU prices a prefill (in ``gpu``'s place); None: the fewest
    #: of ``gpu`` that hold the model, none for ``cpu`` or a GPU without an HBM figure.
    deployment: str | Deployment | None = None
    kv_dtype: str = "bf16"
    #: A TOML file of prices (``cost/prices.py``; None: the defaults), or the prices the
    #: command line read from it: a GPU-hour's dollars.
    prices: str | Prices | None = None

    @cached_property
    def resolved_deployment(self) -> Deployment | None:
        """``deployment`` parsed, else :func:`fitting` of ``gpu``: once per settings."""
        d = self.deployment
        if d is None:
            return fitting(self.device, self.shape)
        return parse_deployment(d)

    def check(self) -> Hardware:
        """Names and numbers, before the warehouse is opened: the deployment (refused in one
        line when it does not hold the model, naming the TP that does), at the smallest block,
        and the cost model it asks for (``choice.check_kind``)."""
        d = self.resolved_deployment
        hardware = Hardware() if d is None else of_deployment(d, self.shape, 1, self.kv_dtype)
        check_kind(self.cost_model, self.shape, hardware.gpu or self.device, hardware.gpus or 1)
        _ = self.price_table
        return hardware


def price_savings(wh: str | Path, settings: SavingsSettings) -> pa.Table:
    s = settings
    s.check()
    d = s.resolved_deployment
    hardware, pool = Hardware(), None
    with warehouse.reading(wh) as con:  # the choice first: a refusal writes nothing
        if d is not None:
            hardware = of_deployment(d, s.shape, block_size_of(con), s.kv_dtype)
            pool = (str(hardware.deployment), int(hardware.kv_pool_blocks or 0))
        config = choose_configuration(
            con, s.outcomes_run, s.policy, s.capacity_blocks, s.isolation, pool
        )
    gpu, tp = hardware.gpu or s.device, hardware.gpus or 1
    with warehouse.StageRun(wh, "savings", s) as stage_run:
        with stage_run.reading() as con:
            asked = wants_calibration(s.cost_model, tp)  # a calibration times one GPU
            fitted = calibrated(con, s.shape, gpu) if asked else None
            outcomes, traffic = load_outcomes(con, config)
        cost = cost_model(s.shape, gpu, s.cost_model, fitted, tp=tp)
        gpu_hour = None if gpu is None else s.price_table.gpu_price(gpu)
        table = savings_table(config, outcomes, traffic, cost, hardware.columns(0), gpu_hour)
        with stage_run.publishing() as con:
            warehouse.append(con, "savings", table, stage_run.run_id)
    return table
