"""Stage ``savings``: one configuration's ``request_outcomes`` priced with a prefill cost model
on a deployment → ``savings`` (prefill GPU-seconds, their dollars, and TTFT with and without the
cache, per tenant).

The deployment (``GPU[xTP]``; default: the fewest GPUs of ``gpu`` that hold the model) bounds
what is priced: its KV pool, in the trace's blocks, is the largest cache it can keep, so only a
configuration at most that large is priced as that GPU, and a prefill runs on its TP GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.cost.choice import check_kind, device, wants_calibration
from prefixscope.analysis.cost.deployment import fitting_deployment
from prefixscope.analysis.cost.models import ModelShape, resolve_model
from prefixscope.analysis.cost.prices import load_prices
from prefixscope.analysis.cost.savings import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    cost_model,
    gpu_key,
    savings_table,
)
from prefixscope.analysis.fleet.hardware import Hardware, of_deployment
from prefixscope.analysis.trace.load import block_size_of
from prefixscope.stages.outcomes import calibrated, choose_configuration, load_outcomes


@dataclass(frozen=True)
class SavingsSettings:
    """The model and GPU that price a miss, the cost model (``cost/choice.py``; auto:
    calibrated when the warehouse holds one, else the measured model where it covers, else the
    roofline), and which configuration's outcomes (default: the only one of the newest run that
    the deployment holds)."""

    model: str = DEFAULT_MODEL
    gpu: str = DEFAULT_GPU
    cost_model: str = "auto"
    outcomes_run: str | None = None
    policy: str | None = None
    capacity_blocks: int | None = None
    isolation: str | None = None
    #: A config.json whose shape ``model`` names (``resolve_model``).
    model_config: str | None = None
    #: ``GPU[xTP]`` whose KV pool bounds the capacity priced and whose GPU prices a prefill
    #: (in ``gpu``'s place); None: ``fitting_deployment(gpu)``, none for ``cpu`` or a GPU
    #: without an HBM figure.
    deployment: str | None = None
    kv_dtype: str = "bf16"
    #: A TOML file of prices (``cost/prices.py``; None: the defaults): a GPU-hour's dollars.
    prices: str | None = None

    @property
    def shape(self) -> ModelShape:
        return resolve_model(self.model, self.model_config)

    def resolved_deployment(self) -> str | None:
        return self.deployment or fitting_deployment(self.gpu, self.shape)

    def check(self) -> Hardware:
        """Names and numbers, before the warehouse is opened: the deployment (refused in one
        line when it does not hold the model, naming the TP that does), at the smallest block,
        and the cost model it asks for (``choice.check_kind``)."""
        gpu_key(self.gpu)
        text = self.resolved_deployment()
        hardware = Hardware() if text is None else of_deployment(text, self.shape, 1, self.kv_dtype)
        gpu = hardware.gpu or self.gpu
        check_kind(self.cost_model, self.shape, device(gpu), hardware.gpus or 1)
        load_prices(self.prices)
        return hardware


def price_savings(wh: str | Path, settings: SavingsSettings) -> pa.Table:
    s = settings
    # the deployment as given (a TOML file's path reads back; the GPU's own name may not)
    text = s.resolved_deployment() if s.check().deployment else None
    hardware, pool = Hardware(), None
    with warehouse.reading(wh) as con:  # the choice first: a refusal writes nothing
        if text is not None:
            hardware = of_deployment(text, s.shape, block_size_of(con), s.kv_dtype)
            pool = (str(hardware.deployment), int(hardware.kv_pool_blocks or 0))
        config = choose_configuration(
            con, s.outcomes_run, s.policy, s.capacity_blocks, s.isolation, pool
        )
    gpu, tp = hardware.gpu or s.gpu, hardware.gpus or 1
    with warehouse.StageRun(wh, "savings", s) as stage_run:
        with stage_run.reading() as con:
            asked = wants_calibration(s.cost_model, tp)  # a calibration times one GPU
            fitted = calibrated(con, s.shape, gpu) if asked else None
            outcomes, traffic = load_outcomes(con, config)
        cost = cost_model(s.model, gpu, s.cost_model, fitted, s.model_config, tp)
        spec = device(gpu)
        gpu_hour = None if spec is None else load_prices(s.prices).gpu_price(spec)
        table = savings_table(config, outcomes, traffic, cost, hardware.columns(0), gpu_hour)
        with stage_run.publishing() as con:
            warehouse.append(con, "savings", table, stage_run.run_id)
    return table
