"""The ``fleet_report`` flow's parameters, declared once.

One frozen dataclass holds them: the command line builds it from its flags (each flag's
``dest`` is a field's name, ``cli/flows.py``), the flow takes it as its one parameter, a
schedule stores it as its deployment's parameters (Prefect validates the stored JSON back into
it at each run), and ``parameters.check`` checks it. A new option is a field here and a flag
there. Plain Python, no Prefect: the command line imports it before Prefect starts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from prefixscope.ingest.formats import DEFAULT_TENANT
from prefixscope.ingest.formats.arrival import DEFAULT_ARRIVAL
from prefixscope.pipelines.served import FLOW_GPU, FLOW_MODEL

#: Log-spaced from 1,000 blocks (0.5 M tokens at 512) to 128,000 (the bundled trace's
#: working set is 182,790 blocks, so the curve reaches the ceiling's neighbourhood).
DEFAULT_CAPACITIES = (1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000)
DEFAULT_POLICIES = ("ceiling", "lru", "fifo", "s3fifo", "belady")
DEFAULT_WINDOWS = ("all", "last-half", "steady")
DEFAULT_ISOLATIONS = ("shared",)
#: The fleet grid: every router at two replica counts (the load scales are
#: ``parameters.DEFAULT_FLEET_LOAD_SCALES``).
DEFAULT_FLEET_REPLICAS = (4, 8)
#: The SLO plan's target: see ``parameters.DEFAULT_SLO_DEPLOYMENTS`` for why 5 s.
DEFAULT_SLO = "ttft-p95=5"
DEFAULT_REPORT = "report.html"
DEFAULT_WAREHOUSE = "prefixscope.duckdb"


@dataclass(frozen=True)
class FlowParameters:
    """What one run of the flow does. ``inputs``: log files or glob patterns (expanded when a
    run starts, so a scheduled run picks up the logs that landed since the last);
    ``tenant_from``: bailian, the tenant of each request is its type; ``tenant_field``: the
    field of each line that names its tenant (else ``tenant``); ``synthetic_tenants``: also
    ingest a synthetic log of these tenants (``prefixscope.synthetic``), at the inputs' block
    size: the demo's fleet; ``agent_inputs``: also ingest these coding-agent traces
    (``--format agent-json``: files, folders or archives) as tenant ``agent_tenant``, at the
    inputs' block size, their conversations placed by ``agent_arrival`` from the logs' first
    arrival; ``isolations``: how tenants share each simulated cache (salted answers what
    sharing across tenants is worth); ``savings_*``: what the savings price (the policy and
    capacity whose outcomes are priced: by default ``lru``, or the grid's first
    bounded policy where it has no ``lru``, at the KV pool of the fewest ``savings_gpu`` that
    hold ``savings_model``); ``replay_samples``: also calibrate a
    cost model on that many replayed requests (needs torch); ``plan_target``: the hit-rate
    share of the ceiling the capacity plan sizes for; ``slo``: the SLO plan's latency target;
    ``workers``: processes the stages that fan out use on this machine (without
    ``dask_address``), each holding the trace once; ``metrics_path``: also write the latest
    figures there as OpenMetrics text, after the page; ``fresh``: run every stage, where a run
    of the same flow on the same inputs and settings would otherwise reuse the stages it
    finished (``resume.py``); ``hash_key_file``: the key every stored block hash is keyed with
    (``ingest/hashkey.py``; None: the user's own, made on first use; ``none``: plain hashes).
    An empty list means its default."""

    inputs: tuple[str, ...]
    warehouse_path: str = DEFAULT_WAREHOUSE
    report_path: str = DEFAULT_REPORT
    metrics_path: str | None = None
    format_name: str = "mooncake"
    tenant: str = DEFAULT_TENANT
    tenant_from: str | None = None
    tenant_field: str | None = None
    synthetic_tenants: tuple[str, ...] = ()
    agent_inputs: tuple[str, ...] = ()
    agent_tenant: str = "agents"
    agent_arrival: str = DEFAULT_ARRIVAL
    policies: tuple[str, ...] = DEFAULT_POLICIES
    capacities_blocks: tuple[int, ...] = DEFAULT_CAPACITIES
    windows: tuple[str, ...] = DEFAULT_WINDOWS
    isolations: tuple[str, ...] = DEFAULT_ISOLATIONS
    savings_policy: str | None = None
    savings_capacity_blocks: int | None = None
    savings_model: str = FLOW_MODEL
    savings_model_config: str | None = None
    savings_gpu: str = FLOW_GPU
    replay_samples: int = 0
    fleet_replicas: tuple[int, ...] = DEFAULT_FLEET_REPLICAS
    plan_target: float = 0.9
    slo: str = DEFAULT_SLO
    workers: int = 1
    dask_address: str | None = None
    fresh: bool = False
    hash_key_file: str | None = None
    #: Where the simulated caches start (``trace/warm.py``): ``cold``, ``events`` or
    #: ``first-window:SECONDS``; the simulate and fleet stages start so.
    warm_start: str = "cold"

    @classmethod
    def given(cls, values: dict[str, object]) -> FlowParameters:
        """The parameters from ``values`` by field name, as a command line gives them: a value
        left unset (None, or an empty list) takes its default, lists become tuples, and names
        that are no field are left out (a parser's own flags)."""
        names = {f.name for f in fields(cls)}
        kept = {
            k: tuple(v) if isinstance(v, list) else v
            for k, v in values.items()
            if k in names and v is not None and v != []
        }
        return cls(**kept)  # type: ignore[arg-type]

    def stored(self) -> dict[str, object]:
        """The parameters as JSON values (lists for tuples), by field name: what a schedule's
        deployment stores, and what the flow's resume key is made of."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in fields(self)
        }
