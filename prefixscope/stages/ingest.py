"""Stage ``ingest``: request logs → ``requests``, ``rejects``, ``sources``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from prefixscope import warehouse
from prefixscope.ingest import IngestOptions, IngestResult, ingest_files


@dataclass(frozen=True)
class IngestSettings:
    inputs: tuple[str, ...]
    format: str = "mooncake"
    options: IngestOptions = field(default_factory=IngestOptions)

    def recorded(self) -> dict[str, object]:
        """What ``runs`` keeps: never the pseudonymisation key itself."""
        options = {**self.options.__dict__, "pseudonymize_key": bool(self.options.pseudonymize_key)}
        return {"inputs": list(self.inputs), "format": self.format, "options": options}


def run(wh: str | Path, settings: IngestSettings) -> IngestResult:
    with warehouse.stage_run(wh, "ingest", settings.recorded()) as (con, run_id):
        return ingest_files(con, settings.inputs, settings.format, settings.options, run_id)
