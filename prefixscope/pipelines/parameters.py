"""The ``fleet_report`` flow's parameters: their defaults, the settings the flow derives from
them, and the check every one of them passes before the first stage runs.

Plain Python, no Prefect: the command line runs the same check before it starts the flow (and
Prefect's temporary server), so a wrong flag stops it in a second with one line and nothing
written; the flow runs it again first, for a scheduled run whose parameters came from a
deployment.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prefixscope import warehouse
from prefixscope.analysis.cost.choice import device
from prefixscope.analysis.cost.deployment import Deployment, fitting
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.fleet.hardware import of_deployment
from prefixscope.analysis.fleet.routers import ROUTERS
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.simulation.scenarios import Scenario, scenarios
from prefixscope.analysis.structure.tables import StructureSettings
from prefixscope.analysis.trace.warm import WarmStart, parse_warm_start
from prefixscope.analysis.trace.windows import check_windows
from prefixscope.export.atomic import check_writable
from prefixscope.ingest import FORMATS, IngestOptions
from prefixscope.ingest.formats.arrival import Arrival
from prefixscope.ingest.hashkey import PLAIN, read_key
from prefixscope.ingest.lines import holds_text
from prefixscope.ingest.staging import check_inputs
from prefixscope.pipelines.flow_parameters import (
    DEFAULT_CAPACITIES,
    DEFAULT_FLEET_REPLICAS,
    DEFAULT_ISOLATIONS,
    DEFAULT_POLICIES,
    DEFAULT_SLO,
    DEFAULT_WINDOWS,
    FlowParameters,
)
from prefixscope.pipelines.served import FLOW_MODEL
from prefixscope.stages import fleet as fleet_stage
from prefixscope.stages import plan as plan_stage
from prefixscope.stages import plan_slo as plan_slo_stage
from prefixscope.stages.simulate import check_warm_start
from prefixscope.tenants import check_tenant

#: The fleet grid's loads: the traffic as logged and twice it (each replica's cache is the
#: deployment's KV pool, or the grid's middle capacity: ``fleet_settings``).
DEFAULT_FLEET_LOAD_SCALES = (1.0, 2.0)
#: The fleet and the value of the next GiB simulate many configurations each, so on a trace
#: larger than this they measure its most recent stretch of this many lookups
#: (``analysis/trace/tail.py``): about 42 hours of the bundled trace's traffic, twice the ×20
#: benchmark trace. Everything else takes every lookup.
RECENT_LOOKUPS = 12_000_000
#: The SLO plan's fleet (``plan --deployments … --slo …``): DeepSeek-V3 on 8 × H200, Kimi's
#: own scale, where one replica's HBM holds 1,410 of the bundled hour's 512-token blocks. The
#: SLO, a TTFT p95 of 5 s, is about twice the 2.38 s one such replica takes to prefill the
#: hour's 95th-percentile prompt (39,551 tokens) alone with nothing cached (docs/plan.md), so
#: on that hour both a fleet with the cache and one without can meet it, and what the cache is
#: worth is a count of GPUs. The demo's coding agents (6.7% of its requests; prompts of 82 K
#: tokens at the median, 298 K at their p95) are not prefilled within it without the cache,
#: so there no fleet without it meets it. At the logged load only: each load scale is a
#: search of its own.
DEFAULT_SLO_MODEL = FLOW_MODEL  # one model throughout the report (``served.py``)
DEFAULT_SLO_DEPLOYMENTS = ("h200x8",)
DEFAULT_SLO_LOAD_SCALES = (1.0,)
#: The SLO plan also splits its fleet into prefill and decode pools (the bundled hour's own
#: layout: Mooncake serves Kimi disaggregated), the KV over RDMA between nodes.
DEFAULT_SLO_LINK = "rdma"
#: The flow's SLO plan runs on ``ideal``, not the planner's default ``vllm`` pool: on the
#: generated week ``vllm`` takes 2.1× its time (284.0 s against 133.2 s at 83d982a,
#: ``flow_speed.py --slo-engines``; docs/plan.md, "What is searched"), 151 s more, which would
#: take the week's flow from 453.2 s (925ba6e) to about 604 s, past its 10 minutes; sittings of
#: one code have differed by 28% (442.9–567.6 s at stop 68; benchmarks/RESULTS.md). Its page
#: says its answers are a lower bound (``dashboards/plan_slo.IDEAL_CAVEAT``).
DEFAULT_SLO_ENGINE = "ideal"


@dataclass(frozen=True)
class Checked:
    """The parameters, checked, with their defaults filled in."""

    paths: tuple[str, ...]  # the inputs, patterns expanded
    policies: tuple[str, ...]
    capacities_blocks: tuple[int, ...]
    windows: tuple[str, ...]
    isolations: tuple[str, ...]
    fleet_replicas: tuple[int, ...]
    grid: tuple[Scenario, ...]
    priced: Scenario  # the scenario whose outcomes the savings price
    #: ``savings_gpu`` resolved, once for the run (None: the CPU): the stages take it.
    gpu: GpuSpec | None = None
    #: What the savings and the fleet price: the fewest GPUs of ``savings_gpu`` that hold the
    #: model (None: a GPU without an HBM figure, or the CPU); the savings price its KV pool.
    deployment: Deployment | None = None
    #: The capacities simulated: those given, and the deployment's pool (the priced one).
    simulated_blocks: tuple[int, ...] = ()
    #: The coding-agent traces, patterns expanded (``--agent-input``).
    agent_paths: tuple[str, ...] = ()
    #: Where the simulated caches start (``--warm-start``).
    warm_start: WarmStart = field(default_factory=WarmStart)


def check(params: FlowParameters, *, serving: bool = False) -> Checked:
    """Every parameter, before any work: ValueError (or OSError, for an input that cannot be
    read) with one line that names it. Lists take each value once: a value given twice would
    run, and write, its rows twice. ``serving``: checked when a schedule is served, before
    its logs may exist: a pattern need only name a folder that exists (each run expands it,
    and refuses a pattern that then matches nothing)."""
    for where in (params.warehouse_path, params.report_path, params.metrics_path):
        if where is not None and Path(where).is_dir():
            raise IsADirectoryError(21, "Is a directory", where)
    if params.metrics_path is not None:
        check_writable(Path(params.metrics_path), "--metrics-out")
    if params.format_name not in FORMATS:
        raise ValueError(
            f"unknown format {params.format_name!r}; known: {', '.join(sorted(FORMATS))}"
        )
    if params.hash_key_file is not None and params.hash_key_file.strip().lower() != PLAIN:
        read_key(Path(params.hash_key_file))  # the default key is made by the run, on first use
    check_tenant(params.tenant, "--tenant")
    fields = (("tenant", params.tenant_field),) if params.tenant_field else ()
    IngestOptions(
        tenant=params.tenant, tenant_from=params.tenant_from, fields=fields
    )  # its own checks
    for name in params.synthetic_tenants or ():
        check_tenant(name, "--synthetic-tenants")
    if not (params.tenant_field or params.tenant_from) and params.tenant in (
        params.synthetic_tenants or ()
    ):
        # one name for two logs would merge a real tenant's rows with a synthetic one's
        raise ValueError(
            f"--synthetic-tenants names {params.tenant!r}, the --tenant of the logs — give the "
            "synthetic tenants other names"
        )
    agent_paths = check_agents(params) if params.agent_inputs and not serving else ()
    resolved = {
        "--synthetic-tenants": tuple(params.synthetic_tenants or ()),
        "--policy": tuple(params.policies or DEFAULT_POLICIES),
        "--capacity-blocks": tuple(params.capacities_blocks or DEFAULT_CAPACITIES),
        "--window": tuple(params.windows or DEFAULT_WINDOWS),
        "--isolation": tuple(params.isolations or DEFAULT_ISOLATIONS),
        "--fleet-replicas": tuple(params.fleet_replicas or DEFAULT_FLEET_REPLICAS),
    }
    for flag, values in resolved.items():
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"{flag} gives {', '.join(twice)} twice — give each value once")
    check_windows(resolved["--window"])
    warm = parse_warm_start(params.warm_start)
    check_warm_start(warm, resolved["--policy"], resolved["--isolation"])
    bounded = [name for name in resolved["--policy"] if name != "ceiling"]
    if params.savings_policy is not None and params.savings_policy not in bounded:
        raise ValueError(
            f"--savings-policy {params.savings_policy[:80]!r} is not a bounded policy the flow "
            f"simulates ({', '.join(bounded) or 'none'}) — give one of them, or add it to --policy"
        )
    shape = resolve_model(params.savings_model, params.savings_model_config)
    spec = device(params.savings_gpu)  # a GPU file read here, once for the run
    deployment = fitting(spec, shape)
    block_size = FORMATS[params.format_name].default_block_size
    pool = None
    if deployment is not None:
        pool = of_deployment(deployment, shape, block_size, "bf16").kv_pool_blocks
    if (
        pool is not None
        and params.savings_capacity_blocks is not None
        and params.savings_capacity_blocks > pool
    ):
        raise ValueError(
            f"--savings-capacity-blocks {params.savings_capacity_blocks:,} is more KV than "
            f"{deployment.name}'s pool of {pool:,} blocks of {shape.name} — give at most "
            f"{pool:,}, "
            "or a GPU that holds more (--savings-gpu)"
        )
    simulated = tuple(sorted({*resolved["--capacity-blocks"], *([pool] if pool else [])}))
    grid = scenarios(resolved["--policy"], simulated, resolved["--isolation"])
    for what, value in (("--replay-samples", params.replay_samples), ("--workers", params.workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{what} must be a whole number from 0, got {value!r}")
    settings = fleet_settings(
        capacities_blocks=resolved["--capacity-blocks"],
        windows=resolved["--window"],
        model=params.savings_model,
        gpu=params.savings_gpu if spec is None else spec,
        replicas=resolved["--fleet-replicas"],
        dask_address=params.dask_address,
        workers=params.workers,
        deployment=deployment,
        model_config=params.savings_model_config,
        warm_start=warm,
    )
    settings.check()
    plan_stage.PlanSettings(
        target=params.plan_target,
        model=params.savings_model,
        gpu=params.savings_gpu if spec is None else spec,
        model_config=params.savings_model_config,
    ).check()
    slo_settings(slo=params.slo, dask_address=params.dask_address, workers=params.workers).check()
    if serving:
        paths = tuple(pending_inputs(params.inputs))
    else:
        paths = tuple(readable(expand_inputs(params.inputs)))
        if not params.synthetic_tenants:
            refuse_nothing_to_report(paths, params.warehouse_path)
    return Checked(
        paths=paths,
        policies=resolved["--policy"],
        capacities_blocks=resolved["--capacity-blocks"],
        windows=resolved["--window"],
        isolations=resolved["--isolation"],
        fleet_replicas=resolved["--fleet-replicas"],
        grid=tuple(grid),
        priced=outcomes_scenario(
            grid, params.savings_policy or "lru", params.savings_capacity_blocks or pool
        ),
        gpu=spec,
        deployment=deployment,
        simulated_blocks=simulated,
        agent_paths=agent_paths,
        warm_start=warm,
    )


def check_agents(params: FlowParameters) -> tuple[str, ...]:
    """The agent traces' paths (patterns expanded), each a file, folder or archive that
    exists; their tenant a valid name no other log of the run uses; their placement one that
    parses."""
    check_tenant(params.agent_tenant, "--agent-tenant")
    others = {*(params.synthetic_tenants or ()), *([] if params.tenant_field else [params.tenant])}
    if params.agent_tenant in others:
        raise ValueError(
            f"--agent-tenant {params.agent_tenant!r} is the tenant of another log of the run — "
            "give the agent traces a name of their own"
        )
    Arrival.parse(params.agent_arrival, flag="--agent-arrival")
    paths = tuple(expand_inputs(params.agent_inputs))
    check_inputs(paths, "agent-json")
    return paths


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """Input paths, with glob patterns expanded (sorted) when the run starts: a scheduled run
    picks up the logs that landed since the last. A pattern that matches nothing is an error,
    as a missing file is."""
    paths: list[str] = []
    for item in inputs:
        if glob.has_magic(item):
            matched = sorted(glob.glob(item))
            if not matched:
                raise FileNotFoundError(
                    f"no input file matches {item!r} — check the pattern and its folder"
                )
            paths += matched
        else:
            paths.append(item)
    return paths


def pending_inputs(inputs: Sequence[str]) -> list[str]:
    """The inputs of a schedule as it is served: each file readable, each pattern's folder
    (its part before the first wildcard) an existing folder; patterns are not expanded."""
    if not inputs:
        raise ValueError("give at least one --input file")
    for item in inputs:
        if not glob.has_magic(item):
            readable([item])
            continue
        head = Path(item)
        while glob.has_magic(str(head)):
            head = head.parent
        if not head.is_dir():
            raise FileNotFoundError(
                f"the folder of --input {item!r} ({head}) does not exist — create it, or "
                "check the pattern"
            )
    return list(inputs)


def refuse_nothing_to_report(paths: Sequence[str], warehouse_path: str | None) -> None:
    """ValueError when every input is empty (or blank) and the warehouse holds no request of
    an earlier run: the flow would have nothing to measure, and would stop only after its
    ingest had created the warehouse. Empty inputs beside earlier requests are a run like
    any other (a scheduled run between two logs).

    This opens an input a second time, before ingest reads it, and keeps it so: it reads only
    up to the first byte that is not whitespace of the first input that has one (one chunk:
    3.8 ms for the bundled trace, gzip included), so only an all-blank input is read through;
    and it must answer before the flow's first write, which the ingest stage's own reading
    (inside its run, after Prefect starts) cannot."""
    if any(holds_text(Path(p)) for p in paths):
        return
    if warehouse_path is not None and Path(warehouse_path).is_file():
        with warehouse.reading(warehouse_path) as con:
            if con.execute("SELECT count(*) FROM requests").fetchone()[0]:
                return
    what = f"{paths[0]} is empty" if len(paths) == 1 else f"all {len(paths)} inputs are empty"
    raise ValueError(
        f"{what}: there is no request to report on — give --input logs that hold requests"
    )


def readable(paths: Sequence[str]) -> list[str]:
    """``paths`` when each is a file this process may read (OSError, naming it, otherwise)."""
    if not paths:
        raise ValueError("give at least one --input file")
    for p in paths:
        path = Path(p)
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory", p)
        if not path.is_file():
            raise FileNotFoundError(2, "No such file or directory", p)
        if not os.access(path, os.R_OK):
            raise PermissionError(13, "Permission denied", p)
    return list(paths)


def middle_capacity(capacities_blocks: Sequence[int]) -> int | None:
    caps = sorted(capacities_blocks)
    return caps[len(caps) // 2] if caps else None


def structure_settings(capacities_blocks: Sequence[int]) -> StructureSettings:
    """The structure stage simulates the middle capacity of the flow's grid."""
    return StructureSettings(capacity_blocks=middle_capacity(capacities_blocks))


def fleet_settings(
    *,
    capacities_blocks: Sequence[int],
    windows: Sequence[str],
    model: str,
    gpu: str | GpuSpec,
    replicas: Sequence[int],
    dask_address: str | None,
    workers: int = 1,
    deployment: Deployment | None = None,
    model_config: str | None = None,
    warm_start: WarmStart | None = None,
) -> fleet_stage.FleetSettings:
    """Every router at each replica count, each replica ``deployment`` at its own KV pool (a
    fleet that can exist); without one, the grid's middle capacity."""
    middle = Capacities(blocks=[middle_capacity(capacities_blocks) or 16_000])
    return fleet_stage.FleetSettings(
        routers=tuple(ROUTERS),
        replicas=tuple(replicas),
        capacities=Capacities() if deployment else middle,
        deployments=(deployment,) if deployment else (),
        load_scales=DEFAULT_FLEET_LOAD_SCALES,
        windows=tuple(windows),
        model=model,
        model_config=model_config,
        gpu=gpu,
        workers=workers if dask_address is None else None,
        dask_address=dask_address,
        max_lookups=RECENT_LOOKUPS,
        warm_start=warm_start or WarmStart(),
    )


def slo_settings(
    *, slo: str | None, dask_address: str | None, workers: int = 1
) -> plan_slo_stage.PlanSloSettings:
    """The flow's SLO plan: the cheapest fleet of ``DEFAULT_SLO_DEPLOYMENTS`` serving
    ``DEFAULT_SLO_MODEL`` that meets ``slo`` (None: the default), with and without the cache."""
    return plan_slo_stage.PlanSloSettings(
        deployments=DEFAULT_SLO_DEPLOYMENTS,
        slo=DEFAULT_SLO if slo is None else slo,  # an empty one is refused, not the default
        load_scales=DEFAULT_SLO_LOAD_SCALES,
        model=DEFAULT_SLO_MODEL,
        workers=workers if dask_address is None else None,
        dask_address=dask_address,
        disagg_link=DEFAULT_SLO_LINK,
        engine=DEFAULT_SLO_ENGINE,
    )


def outcomes_scenario(grid: Sequence[Scenario], policy: str, capacity: int | None) -> Scenario:
    """The scenario whose per-request outcomes are priced: ``policy`` at ``capacity`` (default:
    the middle capacity) under the grid's first isolation (shared, unless it was left out),
    else the first bounded scenario of the grid."""
    first = grid[0].isolation if grid else "shared"
    bounded = [
        s
        for s in grid
        if s.policy == policy and s.capacity_blocks is not None and s.isolation == first
    ]
    if capacity is not None:
        bounded = [s for s in bounded if s.capacity_blocks == capacity]
    if bounded:
        return bounded[len(bounded) // 2]
    return next((s for s in grid if s.capacity_blocks is not None), grid[0])
