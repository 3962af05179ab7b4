"""Stage ``ingest --format vllm-events``: KV events capture files → ``kv_events``, ``rejects``,
``sources``. Every file is read and decoded with the warehouse closed (it is opened read-only
first, for the block size of its requests); the write lock is held only to publish."""

from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from prefixscope import warehouse
from prefixscope.ingest.hashkey import USER_KEY, HashKey, fingerprint_of, resolved
from prefixscope.ingest.kvevents.publish import (
    CaptureFile,
    CaptureResult,
    file_id_of,
    publish_captures,
    warehouse_block_sizes,
)
from prefixscope.ingest.kvevents.rows import FORMAT, parse_capture


@dataclass(frozen=True)
class EventIngestSettings:
    """``block_size``: the engine's block size in tokens, when the warehouse holds no requests
    to take it from (None: whatever the events say)."""

    inputs: tuple[str, ...]
    block_size: int | None = None
    format: str = FORMAT
    #: Every stored hash keyed by it (``ingest/hashkey.py``); None: plain hashes; default: the
    #: user's own key.
    hash_key: HashKey | str | None = USER_KEY

    def recorded(self) -> dict[str, object]:
        """What ``runs`` keeps: the key's fingerprint, never the key."""
        return {
            "inputs": list(self.inputs),
            "block_size": self.block_size,
            "format": self.format,
            "hash_key": fingerprint_of(self.hash_key),
        }


def check_files(paths: tuple[str, ...]) -> None:
    """Refuse, before anything is read or written, inputs that are not regular files."""
    if not paths:
        raise ValueError("no input file given — give --input FILE")
    for p in paths:
        if not os.path.exists(p):
            raise FileNotFoundError(
                f"no such input file: {p} — check the path; nothing was written"
            )
        if not stat.S_ISREG(os.stat(p).st_mode):
            raise ValueError(f"{p} is not a regular file — give a capture-events file")


def expected_block_sizes(wh: str | Path, flag: int | None) -> set[int] | None:
    """The block sizes a stored event must have: the warehouse's requests', else ``flag``,
    else any (None). A ``flag`` the warehouse contradicts is refused."""
    sizes: set[int] = set()
    if Path(wh).exists():
        with warehouse.reading(wh) as con:
            sizes = warehouse_block_sizes(con)
    if sizes and flag is not None and flag not in sizes:
        shown = ", ".join(str(s) for s in sorted(sizes))
        raise ValueError(
            f"--block-size {flag} differs from the warehouse's requests ({shown} tokens) — the "
            "events must use the requests' block size; drop --block-size or re-ingest them"
        )
    if sizes:
        return sizes
    return None if flag is None else {flag}


def read_capture(
    path: Path, sizes: set[int] | None, batches: set[tuple[int, bytes]] | None = None
) -> CaptureFile:
    """One capture file decoded (``batches``: those of the files read before it, which it
    does not count again); raises ValueError (one line) when it is wholly unusable."""
    parsed = parse_capture(path, sizes, batches)
    copies = parsed.reasons.get("duplicate_batch", 0)
    if parsed.accepted == 0 and not (copies and copies == parsed.rejected):
        if parsed.frames == 0 and parsed.tail is None:
            raise ValueError(f"{path} holds no batch — capture for longer; nothing was written")
        common = Counter(parsed.reasons).most_common(1)
        why = f" (most often: {common[0][0]})" if common else ""
        raise ValueError(
            f"none of the events in {path} could be read{why} — check that it is a capture of "
            "a vLLM KV events publisher; nothing was written"
        )
    if parsed.reasons.get("block_size_mismatch") and parsed.stored == 0:
        raise ValueError(
            f"every block stored in {path} has another block size than the warehouse's "
            f"({', '.join(str(s) for s in sorted(sizes or ()))} tokens) — ingest the requests "
            "with the engine's --block-size, or the events into another warehouse; nothing "
            "was written"
        )
    return CaptureFile(path, str(path.resolve()), file_id_of(path), parsed)


def ingest_events(wh: str | Path, settings: EventIngestSettings) -> list[CaptureResult]:
    check_files(settings.inputs)
    sizes = expected_block_sizes(wh, settings.block_size)
    files: list[CaptureFile] = []
    seen: set[str] = set()
    batches: set[tuple[int, bytes]] = set()  # one publisher captured into two files: once
    for p in settings.inputs:
        f = read_capture(Path(p), sizes, batches)
        if f.file_id not in seen and f.resolved not in seen:  # given twice: read once
            seen.update((f.file_id, f.resolved))
            files.append(f)
    key = resolved(settings.hash_key)  # the user's key read once, for the record and the rows
    recorded = replace(settings, hash_key=key).recorded()
    stage_run = warehouse.StageRun(wh, "ingest", recorded, create=True)
    with stage_run, stage_run.writing() as con:
        return publish_captures(con, files, stage_run.run_id, key)
