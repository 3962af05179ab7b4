"""The ``fleet_report`` flow: ingest [+ a synthetic multi-tenant log] → simulate every policy ×
capacity × isolation → LRU curve → structure → [replay] → fleet (routers × replicas × load,
priced like the savings) → plan → plan-slo (the cheapest fleet of deployments that meets a
latency SLO, with and without the cache) → [validate, when the logs carry the engines'
cached-token counts] → savings → report → summary (the short answer, returned and published as
a markdown artifact).

The flow only sequences. Each task is one stage (``prefixscope.stages``): it opens the
warehouse for its own step and closes it, so a task can retry without shared state. A stage
that fans out (the simulations, a grid curve) does so itself, on this machine's cores or on the
Dask cluster at ``dask_address``, with the trace sent to each worker once; the warehouse never
leaves this process.
"""

from __future__ import annotations

import errno
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import State

from prefixscope import resources, synthetic, warehouse
from prefixscope.analysis.curves.settings import CurveSettings
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.simulation.scenarios import Scenario, Settings
from prefixscope.analysis.structure.tables import StructureSettings
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.savings import format_savings
from prefixscope.dashboards.summary import summarize
from prefixscope.dashboards.text import format_hit_rates
from prefixscope.export.metrics import write_metrics
from prefixscope.ingest import FORMATS, IngestOptions, IngestResult
from prefixscope.ingest.hashkey import resolve_key
from prefixscope.pipelines import parameters, resume
from prefixscope.pipelines.agent_traces import agent_source
from prefixscope.pipelines.flow_parameters import FlowParameters
from prefixscope.pipelines.parameters import (
    RECENT_LOOKUPS,
    expand_inputs,
    fleet_settings,
    structure_settings,
)
from prefixscope.pipelines.progress import steps
from prefixscope.resources import say
from prefixscope.stages import curve as curve_stage
from prefixscope.stages import fleet as fleet_stage
from prefixscope.stages import ingest as ingest_stage
from prefixscope.stages import plan as plan_stage
from prefixscope.stages import plan_slo as plan_slo_stage
from prefixscope.stages import replay as replay_stage
from prefixscope.stages import report as report_stage
from prefixscope.stages import savings as savings_stage
from prefixscope.stages import simulate as simulate_stage
from prefixscope.stages import structure as structure_stage
from prefixscope.stages import validate as validate_stage


def transient(task: object, task_run: object, state: State) -> bool:
    """Whether a failed stage is worth one more try: an I/O error that may pass (a network
    file system, a busy disk), never a user's error (a wrong input or flag), which would fail
    the same way again."""
    exc = state.data
    lasting = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
    if isinstance(exc, OSError):
        return not isinstance(exc, lasting) and exc.errno != errno.ENOSPC
    return isinstance(exc, duckdb.IOException)


T = TypeVar("T")

STAGE = {
    "cache_policy": NO_CACHE,
    "retries": 1,
    "retry_delay_seconds": 2,
    "retry_condition_fn": transient,
}
#: The key the run's summary is published under (a new version each run).
SUMMARY_ARTIFACT = "fleet-report-summary"


@dataclass(frozen=True)
class FleetReportOutcome:
    warehouse: str
    report: str
    lines: int
    accepted: int
    rejected: int
    table: str  # the fleet's hit rates as a short text table
    savings: str = ""  # prefill GPU-seconds and TTFT with and without the cache, per tenant
    summary: str = ""  # the short answer (at most 15 lines), as the terminal prints it


@task(**STAGE)
def ingest(wh: str, settings: ingest_stage.IngestSettings) -> IngestResult:
    result = ingest_stage.ingest_logs(wh, settings)
    get_run_logger().info(
        "ingested %d lines: %d accepted, %d rejected",
        result.lines,
        result.accepted,
        result.rejected,
    )
    return result


@task(cache_policy=NO_CACHE)
def synthesize(wh: str, tenants: list[str], block_size: int) -> str:
    """A synthetic log of ``tenants`` (``synthetic.demo_workload``, seed 0) beside the warehouse,
    named by their digest (a name may hold ``/``): the same each run, replaced by a re-ingest."""
    digest = hashlib.sha256("\n".join(tenants).encode()).hexdigest()[:16]
    path = Path(wh).with_name(f"{Path(wh).stem}.synthetic-{digest}.jsonl")
    workload = synthetic.demo_workload(tuple(tenants), block_size)
    return str(synthetic.write_bailian(path, workload, seed=0))


@task(**STAGE)
def simulate(wh: str, settings: simulate_stage.SimulateSettings) -> simulate_stage.SimulateResult:
    return simulate_stage.simulate_policies(wh, settings)


@task(**STAGE)
def fleet(wh: str, settings: fleet_stage.FleetSettings) -> int:
    return fleet_stage.simulate_fleets(wh, settings).hit_rates.num_rows


@task(**STAGE)
def plan(wh: str, settings: plan_stage.PlanSettings) -> int:
    return plan_stage.plan_capacity(wh, settings).num_rows


@task(**STAGE)
def plan_slo(wh: str, settings: plan_slo_stage.PlanSloSettings) -> int:
    return plan_slo_stage.plan_for_slo(wh, settings).fleets.num_rows


@task(**STAGE)
def curve(wh: str, settings: curve_stage.CurveStageSettings) -> int:
    return curve_stage.measure_curve(wh, settings).table.num_rows


@task(**STAGE)
def structure(wh: str, settings: StructureSettings) -> str:
    return structure_stage.find_structure(wh, settings).run_id


@task(cache_policy=NO_CACHE)
def replay(wh: str, scenario: Scenario, samples: int) -> tuple[str, str] | None:
    """Calibrate a prefill cost model on this machine (CPU, or CUDA when present); returns the
    (model, gpu) it was calibrated for, or None when torch is not installed."""
    try:
        import torch

        from prefixscope.gpu_replay.replay import ReplayOptions
    except ImportError:
        get_run_logger().warning("replay skipped: torch is not installed (prefixscope[replay])")
        return None
    options = ReplayOptions(
        device="cuda" if torch.cuda.is_available() else "cpu",
        samples=samples,
        policy=scenario.policy,
        capacity_blocks=scenario.capacity_blocks,
        isolation=scenario.isolation,
    )
    _, result = replay_stage.calibrate_by_replay(wh, options)
    return str(result.samples["model"][0]), result.gpu.name


@task(**STAGE)
def validate(wh: str, settings: validate_stage.ValidateSettings) -> int | None:
    """The fleet's effective capacity (blocks) from the engines' reported cached tokens."""
    fleet_row = validate_stage.validate_capacity(wh, settings).agreement.to_pylist()[0]
    get_run_logger().info("effective capacity: %s blocks", f"{fleet_row['capacity_blocks']:,}")
    return fleet_row["capacity_blocks"]


@task(**STAGE)
def savings(wh: str, settings: savings_stage.SavingsSettings) -> str:
    return format_savings(savings_stage.price_savings(wh, settings))


@task(**STAGE)
def report(wh: str, settings: report_stage.ReportSettings) -> str:
    return str(report_stage.write_report(wh, settings))


@task(**STAGE)
def metrics(wh: str, out: str) -> str:
    """The latest figures as OpenMetrics text, for Prometheus (``export/metrics.py``)."""
    return str(write_metrics(wh, out).out)


@task(cache_policy=NO_CACHE)
def summary(wh: str, page: str) -> str:
    """The short answer from the warehouse's views: returned as the terminal prints it, and
    published as a markdown artifact."""
    with warehouse.connect(wh, read_only=True) as con:
        answer = summarize(con, page, wh)
    create_markdown_artifact(
        markdown=answer.markdown(),
        key=SUMMARY_ARTIFACT,
        description="What the prefix cache is worth: the short answer of this run",
    )
    return answer.text()


class Steps:
    """Runs the flow's steps, in order, each recorded as ``KEY:N`` (``resume.py``); reuses a
    step an earlier run of the same flow finished, while every step before it was reused too,
    reading back what the flow needs of it (``read_back(run_id)``). A step without a
    ``read_back`` always runs (the answer's last steps: the savings, the page)."""

    def __init__(self, key: str, done: dict[str, str]) -> None:
        self.key, self.done = key, done
        self.count = 0
        self.chain = True
        self.reused: list[str] = []

    def __call__(
        self, name: str, call: Callable[[], T], read_back: Callable[[str], T] | None = None
    ) -> T:
        step = f"{self.key}:{self.count}"
        self.count += 1
        run_id = self.done.get(step)
        if self.chain and read_back is not None and run_id is not None:
            self.reused.append(name)
            return read_back(run_id)
        self.chain = False
        with resources.heap_given_back(), resume.step(step):  # not held through the next
            return call()


def read_counts(wh: str) -> Callable[[str], resume.Counts]:
    return lambda run_id: resume.ingest_counts(wh, run_id)


def read_fleet_rates(wh: str) -> Callable[[str], list[dict]]:
    return lambda run_id: resume.fleet_hit_rates(wh, run_id)


def _fleet_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["tenant"] == FLEET]


def _none(run_id: str) -> None:
    return None


@flow(name="fleet_report", log_prints=True)
def fleet_report(params: FlowParameters) -> FleetReportOutcome:
    """One run of the flow (``flow_parameters.py`` says what each parameter does)."""
    # every parameter before any work (the command line has checked them too)
    checked = parameters.check(params)
    capacities_blocks = list(checked.capacities_blocks)
    simulated_blocks = list(checked.simulated_blocks or capacities_blocks)
    windows = list(checked.windows)
    priced = checked.priced
    wh = params.warehouse_path
    synthetic_tenants, dask_address, workers = (
        params.synthetic_tenants, params.dask_address, params.workers,
    )  # fmt: skip
    names = ["ingest", *(["synthesize", "ingest"] if synthetic_tenants else [])]
    names += [*(["ingest"] if checked.agent_paths else []), "simulate"]
    names += ["curve", "structure", *(["replay"] if params.replay_samples > 0 else []), "fleet"]
    names += ["plan", "plan-slo", "validate", "savings", "report"]
    names += [*(["metrics"] if params.metrics_path else []), "summary"]

    # workers, a cluster and where the page goes change no stage's results: a re-run after a
    # failure with --workers 1 resumes what the failed run finished
    key = resume.fingerprint(
        (*checked.paths, *checked.agent_paths),
        {k: v for k, v in params.stored().items() if k not in resume.NOT_IN_KEY},
    )
    done = {} if params.fresh else resume.finished(wh, key)
    steps_run = Steps(key, done)

    with steps(names) as step:
        step("ingest")
        fields = (("tenant", params.tenant_field),) if params.tenant_field else ()
        hash_key = resolve_key(params.hash_key_file)
        options = IngestOptions(
            tenant=params.tenant, tenant_from=params.tenant_from, fields=fields, hash_key=hash_key
        )
        sources = [ingest_stage.IngestSettings(checked.paths, params.format_name, options)]
        ingested = [steps_run("ingest", lambda: ingest(wh, sources[0]), read_counts(wh))]
        if synthetic_tenants:
            step("synthesize")
            block_size = FORMATS[params.format_name].default_block_size
            log = synthesize(wh, list(synthetic_tenants), block_size)
            step("ingest")
            options = IngestOptions(tenant_from="type", block_size=block_size, hash_key=hash_key)
            settings = ingest_stage.IngestSettings((log,), "bailian", options)
            ingested.append(steps_run("ingest", lambda: ingest(wh, settings), read_counts(wh)))
        if checked.agent_paths:
            step("ingest")
            agents = agent_source(params, checked.agent_paths, hash_key, wh)
            ingested.append(steps_run("ingest", lambda: ingest(wh, agents), read_counts(wh)))
        step("simulate")
        simulate_settings = simulate_stage.SimulateSettings(
            policies=checked.policies,
            capacities=Capacities(blocks=simulated_blocks),  # the priced pool among them
            isolations=checked.isolations,
            measure=Settings(windows=tuple(windows), outcomes=True),
            outcomes_for=priced,
            workers=workers if dask_address is None else None,
            dask_address=dask_address,
            warm_start=checked.warm_start,
        )
        fleet_rates = steps_run(
            "simulate",
            lambda: _fleet_rows(simulate(wh, simulate_settings).tables.hit_rates),
            read_fleet_rates(wh),
        )
        step("curve")
        lru_curve = CurveSettings(
            policy="lru", windows=("all",), capacities=tuple(capacities_blocks)
        )
        steps_run("curve", lambda: curve(wh, curve_stage.CurveStageSettings(lru_curve)), _none)
        step("structure")
        steps_run("structure", lambda: structure(wh, structure_settings(capacities_blocks)), _none)
        calibrated = None
        if params.replay_samples > 0:
            step("replay")
            calibrated = steps_run("replay", lambda: replay(wh, priced, params.replay_samples))
        flow_model = (params.savings_model, params.savings_gpu)
        model, gpu = calibrated or flow_model
        # the flow's GPU as the check resolved it, once for the run
        priced_by = checked.gpu if (model, gpu) == flow_model and checked.gpu else gpu
        # a replay calibrates a catalog model; the config.json is the savings model's shape
        config = params.savings_model_config if model == params.savings_model else None
        step("fleet")
        fleet_settings_ = fleet_settings(
            capacities_blocks=capacities_blocks,
            windows=windows,
            model=model,
            gpu=priced_by,
            replicas=checked.fleet_replicas,
            dask_address=dask_address,
            workers=workers,
            deployment=checked.deployment,
            model_config=config,
            warm_start=checked.warm_start,
        )
        steps_run("fleet", lambda: fleet(wh, fleet_settings_), _none)
        step("plan")
        plan_settings = plan_stage.PlanSettings(
            target=params.plan_target,
            model=model,
            gpu=priced_by,
            model_config=config,
            max_lookups=RECENT_LOOKUPS,
            workers=workers if dask_address is None else None,
            dask_address=dask_address,
        )
        steps_run("plan", lambda: plan(wh, plan_settings), _none)
        step("plan-slo")
        slo_settings = parameters.slo_settings(
            slo=params.slo, dask_address=dask_address, workers=workers
        )
        steps_run("plan-slo", lambda: plan_slo(wh, slo_settings), _none)
        step("validate")
        if validate_stage.has_reports(wh):  # the engines' own counts: the effective capacity
            validate_settings = validate_stage.ValidateSettings(model=model, model_config=config)
            steps_run("validate", lambda: validate(wh, validate_settings), _none)
        if steps_run.reused:
            said = (
                f"reused {', '.join(steps_run.reused)}: finished by an earlier run of this flow "
                "on the same inputs and settings (--fresh runs them again)"
            )
            say(f"prefixscope: {said}")
            get_run_logger().info(said)
        step("savings")
        savings_settings = savings_stage.SavingsSettings(
            model=model,
            gpu=priced_by,
            model_config=config,
            # the flow's deployment where it prices with the flow's GPU; a replay's own
            # device (calibrated) takes the fewest of its GPUs that hold its model
            deployment=checked.deployment if (model, gpu) == flow_model else None,
            policy=priced.policy,
            capacity_blocks=priced.capacity_blocks,
            isolation=priced.isolation,
        )
        saved = steps_run("savings", lambda: savings(wh, savings_settings))
        step("report")
        page_settings = report_stage.ReportSettings(params.report_path)
        page = steps_run("report", lambda: report(wh, page_settings))
        if params.metrics_path:
            step("metrics")
            metrics_path = params.metrics_path
            steps_run("metrics", lambda: metrics(wh, metrics_path))
        step("summary")
        answer = summary(wh, page)
    return FleetReportOutcome(
        warehouse=wh,
        report=page,
        lines=sum(i.lines for i in ingested),
        accepted=sum(i.accepted for i in ingested),
        rejected=sum(i.rejected for i in ingested),
        table=format_hit_rates(pa.Table.from_pylist(fleet_rates)),
        savings=saved,
        summary=answer,
    )


__all__ = ["FleetReportOutcome", "FlowParameters", "expand_inputs", "fleet_report"]
