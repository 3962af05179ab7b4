"""Stage ``ingest``: request logs → ``requests``, ``rejects``, ``sources``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from prefixscope import warehouse
from prefixscope.ingest import IngestOptions, IngestResult
from prefixscope.ingest.hashkey import fingerprint_of, resolved
from prefixscope.ingest.loader import publish, stage_files


@dataclass(frozen=True)
class IngestSettings:
    inputs: tuple[str, ...]
    format: str = "mooncake"
    options: IngestOptions = field(default_factory=IngestOptions)

    def recorded(self) -> dict[str, object]:
        """What ``runs`` keeps: never the pseudonymisation key itself, nor the hash key (its
        fingerprint, or 'none' for plain hashes)."""
        options = {
            **{k: v for k, v in self.options.__dict__.items() if k != "arrival_base"},
            "pseudonymize_key": bool(self.options.pseudonymize_key),
            "hash_key": fingerprint_of(self.options.hash_key),
        }
        return {"inputs": list(self.inputs), "format": self.format, "options": options}


def ingest_logs(wh: str | Path, settings: IngestSettings) -> IngestResult:
    """The only stage that may create the warehouse. Every file is read and parsed first, with
    the warehouse closed; the write lock is held only while the staged rows are published, in
    one transaction (docs/ingest.md)."""
    # the user's key read once, for the record and the rows
    options = replace(settings.options, hash_key=resolved(settings.options.hash_key))
    settings = replace(settings, options=options)
    stage_run = warehouse.StageRun(wh, "ingest", settings.recorded(), create=True)
    with (
        stage_run,
        stage_files(settings.inputs, settings.format, settings.options) as staged,
        stage_run.writing() as con,
    ):
        return publish(con, staged, stage_run.run_id)
