"""The coding-agent traces a flow run ingests beside its logs (``--agent-input``): where they
start and at which block size, as one more ingest source."""

from __future__ import annotations

from pathlib import Path

from prefixscope import warehouse
from prefixscope.ingest import FORMATS, IngestOptions
from prefixscope.ingest.formats import DEFAULT_START
from prefixscope.pipelines.flow_parameters import FlowParameters
from prefixscope.stages.ingest import IngestSettings


def agent_source(
    params: FlowParameters, paths: tuple[str, ...], hash_key: object, wh: str | Path
) -> IngestSettings:
    """The coding-agent traces as one more source: their own tenant, the logs' block size, and
    placed from the logs' first arrival (the Unix epoch when the warehouse holds none), so they
    share the cache's timeline with the logs whatever dates those carry."""
    with warehouse.reading(wh) as con:
        (first,) = con.execute("SELECT min(arrival_ts) FROM requests").fetchall()[0]
    options = IngestOptions(
        tenant=params.agent_tenant,
        block_size=FORMATS[params.format_name].default_block_size,
        arrival=params.agent_arrival,
        start=first or DEFAULT_START,
        hash_key=hash_key,  # type: ignore[arg-type]
    )
    return IngestSettings(paths, "agent-json", options)
