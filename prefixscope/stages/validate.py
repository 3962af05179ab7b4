"""Stage ``validate``: the simulator's hit tokens beside the engines' reported cached tokens,
request by request, and the effective capacity that explains them → ``validation`` and
``validation_disagreements``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefixscope import warehouse
from prefixscope.analysis.cost.models import GIB, resolve_model
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.validate.reported import load_reported
from prefixscope.analysis.validate.tables import Sizing, Validation, fit_policies, validate


@dataclass(frozen=True)
class ValidateSettings:
    """``policy``: the cache the reports are explained by; ``engine_block_size``: the engines'
    block size in tokens (None: inferred from the reports); ``top``: the disagreeing requests
    kept; ``resamples`` / ``seed``: the bootstrap of the capacity's range; ``model`` (or
    ``model_config``) / ``kv_dtype``: the capacity in GiB of KV cache too."""

    policy: str = "lru"
    engine_block_size: int | None = None
    top: int = 20
    resamples: int = 200
    seed: int = 0
    model: str | None = None
    model_config: str | None = None
    kv_dtype: str = "bf16"

    def check(self) -> None:
        if self.policy not in (fits := fit_policies()):
            raise ValueError(
                f"validate fits a bounded policy ({', '.join(fits)}), not "
                f"{self.policy!r} — give --policy lru"
            )
        if self.engine_block_size is not None and self.engine_block_size < 1:
            raise ValueError(f"the engine block size must be positive: {self.engine_block_size}")
        if self.top < 0 or self.resamples < 0:
            raise ValueError("--top and --resamples must not be negative")


def has_reports(wh: str | Path) -> bool:
    """Whether any request carries the engine's reported cached-token count: what the
    ``fleet_report`` flow validates against, when the logs have it."""
    with warehouse.reading(wh) as con:
        found = con.execute(
            "SELECT count(*) FROM requests WHERE reported_cached_tokens IS NOT NULL"
        ).fetchall()
    return found[0][0] > 0


def validate_capacity(wh: str | Path, settings: ValidateSettings) -> Validation:
    settings.check()
    shape = None
    if settings.model or settings.model_config:
        shape = resolve_model(settings.model, settings.model_config)
        shape.kv_bytes_per_token(settings.kv_dtype)  # an unknown dtype fails before the run
    with warehouse.StageRun(wh, "validate", settings) as stage_run:
        with stage_run.reading() as con:
            trace = load_trace(con)
            reported = load_reported(con, trace)
        sizing = Sizing()
        if shape is not None:
            per_block = shape.kv_bytes_per_token(settings.kv_dtype) * trace.block_size / GIB
            sizing = Sizing(shape.name, per_block)
        result = validate(
            trace,
            reported,
            settings.policy,
            settings.engine_block_size,
            settings.top,
            settings.resamples,
            settings.seed,
            sizing,
        )
        with stage_run.publishing() as con:
            warehouse.append(con, "validation", result.agreement, stage_run.run_id)
            warehouse.append(
                con, "validation_disagreements", result.disagreements, stage_run.run_id
            )
    return result
