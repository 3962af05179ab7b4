"""Synthetic gateway logs (the ``openai`` format) whose engine reports come from a known cache:
the truth that ``prefixscope validate`` is checked against.

Conversations as in ``synthetic.py``: each tenant (the ``user`` field) has a few system prompts;
a session sends turns that re-send its whole history with a new user message; sessions start at
random and interleave. Text is words of letters, one token each for the fallback tokenizer.

The reports (``usage.prompt_tokens_details.cached_tokens``) come from a plain-Python engine
cache replayed over the log exactly as ``prefixscope ingest`` hashes it (the log is ingested
once, without reports, to get its blocks): LRU over blocks; a request is served the leading run
of its blocks found in the cache, less the last block of a whole-block prompt (vLLM always
computes the last prompt token); then every block of the request is touched, deepest first, and
the least recent blocks are evicted down to the capacity. The capacity is ``hbm_blocks``, less,
with ``running``, the KV blocks of the requests still running when a request arrives (prompt and
output, for ``output_tokens × tpot_s`` seconds): the room an engine has left for prefix reuse.
``noise_share`` of the reports are replaced by a random whole number of blocks of the prompt.
"""

from __future__ import annotations

import heapq
import json
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prefixscope import warehouse
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.load import load_trace
from prefixscope.ingest import IngestOptions
from prefixscope.stages import ingest

#: How the generated logs are ingested: the tenant is the ``user`` field.
INGEST_OPTIONS = IngestOptions(fields=(("tenant", "user"),))


@dataclass(frozen=True)
class GatewayWorkload:
    sessions: int = 200
    tenants: tuple[str, ...] = ("acme", "globex", "initech")
    prompts_per_tenant: int = 2
    system_words: tuple[int, int] = (40, 600)
    message_words: tuple[int, int] = (5, 150)
    answer_words: tuple[int, int] = (10, 250)
    mean_turns: float = 4.0
    mean_gap_s: float = 40.0
    duration_s: float = 1800.0
    start_s: float = 1_790_000_000.0  # epoch seconds of the first possible arrival
    # tenants whose system prompt opens with the request's own time (``Current time: …Z.``), as
    # clients that stamp each request do: every prompt of theirs is new from its first block
    stamped_tenants: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineCache:
    """The engine's prefix cache: ``hbm_blocks`` of KV (blocks of the log's block size), less
    the running requests' KV when ``running``; ``noise_share`` of the reports garbled."""

    hbm_blocks: int
    running: bool = False
    tpot_s: float = 0.03
    noise_share: float = 0.0


@dataclass(frozen=True)
class GatewayLog:
    """The log written, and the truth per request in replay order: the capacity the engine's
    cache had when it arrived and the cached tokens it reported."""

    path: Path
    capacities: np.ndarray
    reported: np.ndarray


@dataclass(frozen=True, eq=False)
class Draft:
    """A log's lines without reports, and its trace as ``prefixscope ingest`` reads it: write
    it with as many engines as wanted (:meth:`write`)."""

    lines: list[dict]
    trace: Trace
    outputs: np.ndarray  # output tokens per request

    @classmethod
    def build(cls, workload: GatewayWorkload, seed: int = 0) -> Draft:
        lines = conversation_lines(workload, seed)
        with tempfile.TemporaryDirectory(prefix="prefixscope-gateway-") as tmp:
            draft = _write(Path(tmp) / "draft.jsonl", lines)
            db = Path(tmp) / "draft.duckdb"
            ingest.ingest_logs(db, ingest.IngestSettings((str(draft),), "openai", INGEST_OPTIONS))
            with warehouse.reading(db) as con:
                trace = load_trace(con)
        if trace.n_requests != len(lines):
            raise RuntimeError("the draft log lost requests on ingest")
        outputs = np.array([line["response"]["usage"]["completion_tokens"] for line in lines])
        return cls(lines, trace, outputs)

    def write(
        self, path: str | Path, engine: EngineCache, seed: int = 0, layout: str = "chat"
    ) -> GatewayLog:
        """The log with ``engine``'s reports, at ``path`` (ingest it with
        :data:`INGEST_OPTIONS`, and ``--format otlp`` for ``layout="otlp"``), each line in
        ``layout``'s form (:func:`in_layout`): the same requests and reports whatever the
        layout."""
        trace = self.trace
        capacities = _capacities(trace, self.outputs, engine)
        reported = engine_reports(trace, capacities)
        rng = np.random.default_rng(seed + 1)
        garbled = rng.random(trace.n_requests) < engine.noise_share
        reported[garbled] = (
            rng.integers(0, trace.blocks_per_request[garbled] + 1) * trace.block_size
        )
        lines = json.loads(json.dumps(self.lines))  # a copy: the draft stays without reports
        for line, tokens, cached in zip(lines, trace.input_tokens, reported, strict=True):
            usage = line["response"]["usage"]
            usage["prompt_tokens"] = int(tokens)
            usage["prompt_tokens_details"] = {"cached_tokens": int(cached)}
        lines = [in_layout(line, layout, trace.block_size) for line in lines]
        return GatewayLog(_write(Path(path), lines), capacities, reported)


#: The layouts :meth:`Draft.write` writes: the APIs' own, as docs/ingest.md shows them.
LAYOUTS = ("chat", "responses", "anthropic", "otlp")


def in_layout(line: dict, layout: str, block_size: int) -> dict:
    """A chat-layout line as another API logs the same request and the same report:

    - ``responses``: the system prompt as ``instructions``, the turns as ``input`` items with
      ``input_text``/``output_text`` parts; ``usage.input_tokens`` and
      ``input_tokens_details.cached_tokens``;
    - ``anthropic``: the top-level ``system``; ``usage.input_tokens`` excludes the cached
      tokens: ``input_tokens = prompt - cache_read - cache_creation``, the creation being the
      rest of the prompt's whole blocks (what a cache write at the last breakpoint stores);
    - ``otlp``: one OTLP export request holding one chat span, with the GenAI attributes.
    """
    if layout == "chat":
        return line
    messages = line["request"]["messages"]
    system = messages[0]["content"]
    usage = line["response"]["usage"]
    prompt, cached = usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]
    output = usage["completion_tokens"]
    answer = line["response"]["choices"][0]["message"]["content"]
    if layout == "responses":
        part = {"user": "input_text", "assistant": "output_text"}
        items = [
            {"role": m["role"], "content": [{"type": part[m["role"]], "text": m["content"]}]}
            for m in messages[1:]
        ]
        reply = [{"type": "message", "role": "assistant",
                  "content": [{"type": "output_text", "text": answer}]}]  # fmt: skip
        return {
            "timestamp": line["timestamp"],
            "user": line["user"],
            "request": {"model": "synthetic", "instructions": system, "input": items},
            "response": {
                "id": line["response"]["id"],
                "object": "response",
                "output": reply,
                "usage": {
                    "input_tokens": prompt,
                    "input_tokens_details": {"cached_tokens": cached},
                    "output_tokens": output,
                    "total_tokens": prompt + output,
                },
            },  # fmt: skip
        }
    if layout == "anthropic":
        created = max(prompt // block_size * block_size - cached, 0)
        return {
            "timestamp": line["timestamp"],
            "user": line["user"],
            "request": {"model": "synthetic", "system": system, "messages": messages[1:]},
            "response": {
                "id": line["response"]["id"],
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": answer}],
                "usage": {
                    "input_tokens": prompt - cached - created,
                    "cache_read_input_tokens": cached,
                    "cache_creation_input_tokens": created,
                    "output_tokens": output,
                },
            },  # fmt: skip
        }
    if layout == "otlp":
        parts = [{"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]}
                 for m in messages]  # fmt: skip
        attributes = {
            "gen_ai.operation.name": {"stringValue": "chat"},
            "gen_ai.response.id": {"stringValue": line["response"]["id"]},
            "gen_ai.usage.input_tokens": {"intValue": str(prompt)},
            "gen_ai.usage.cache_read.input_tokens": {"intValue": str(cached)},
            "gen_ai.usage.output_tokens": {"intValue": str(output)},
            "gen_ai.input.messages": {"stringValue": json.dumps(parts)},
        }
        number = int(line["response"]["id"].split("-")[-1])
        span = {
            "traceId": f"{number + 1:032x}",
            "spanId": f"{number + 1:016x}",
            "name": "chat synthetic",
            "startTimeUnixNano": str(round(line["timestamp"] * 1000) * 1_000_000),
            "attributes": [{"key": k, "value": v} for k, v in attributes.items()],
        }
        resource = {"attributes": [{"key": "user", "value": {"stringValue": line["user"]}}]}
        return {"resourceSpans": [{"resource": resource,
                                   "scopeSpans": [{"scope": {"name": "synthetic"},
                                                   "spans": [span]}]}]}  # fmt: skip
    raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")


def write_gateway_log(
    path: str | Path, workload: GatewayWorkload, engine: EngineCache, seed: int = 0
) -> GatewayLog:
    """Write a log of ``workload`` with ``engine``'s reports to ``path``."""
    return Draft.build(workload, seed).write(path, engine, seed)


def engine_reports(trace: Trace, capacities: np.ndarray) -> np.ndarray:
    """The cached tokens an LRU engine cache reports for each request, its capacity at each
    arrival given (blocks). Plain Python, independent of the simulator's kernels."""
    cache: OrderedDict[int, None] = OrderedDict()  # least recent first
    out = np.zeros(trace.n_requests, np.int64)
    for r in range(trace.n_requests):
        capacity = int(capacities[r])
        while len(cache) > capacity:
            cache.popitem(last=False)
        blocks = trace.blocks[trace.offsets[r] : trace.offsets[r + 1]].tolist()
        hit = 0
        while hit < len(blocks) and blocks[hit] in cache:
            hit += 1
        if hit == len(blocks) and trace.input_tokens[r] == hit * trace.block_size:
            hit -= 1  # the last prompt token is always computed
        out[r] = max(hit, 0) * trace.block_size
        for b in reversed(blocks):  # deepest first: the shallowest ends the most recent
            cache[b] = None
            cache.move_to_end(b)
        while len(cache) > capacity:
            cache.popitem(last=False)
    return out


def _capacities(trace: Trace, outputs: np.ndarray, engine: EngineCache) -> np.ndarray:
    """The cache's capacity at each arrival: HBM, less the KV of the requests still running."""
    hbm = np.full(trace.n_requests, engine.hbm_blocks, np.int64)
    if not engine.running:
        return hbm
    kv = -(-(trace.input_tokens + outputs) // trace.block_size)
    ends = trace.times + outputs * engine.tpot_s
    running: list[tuple[float, int]] = []  # (end, blocks) of the requests still running
    held = 0
    for r in range(trace.n_requests):
        while running and running[0][0] <= trace.times[r]:
            held -= heapq.heappop(running)[1]
        hbm[r] = max(engine.hbm_blocks - held, 0)
        heapq.heappush(running, (float(ends[r]), int(kv[r])))
        held += int(kv[r])
    return hbm


def conversation_lines(workload: GatewayWorkload, seed: int = 0) -> list[dict]:
    """The log's lines in arrival order (distinct times), without cached-token reports."""
    w, rng = workload, np.random.default_rng(seed)
    vocabulary = [_word(i) for i in range(4096)]

    def text(bounds: tuple[int, int]) -> str:
        n = int(rng.integers(bounds[0], bounds[1] + 1))
        return " ".join(vocabulary[i] for i in rng.integers(0, len(vocabulary), n))

    prompts = {t: [text(w.system_words) for _ in range(w.prompts_per_tenant)] for t in w.tenants}
    events = []  # (time, tenant, messages, answer words)
    for _ in range(w.sessions):
        tenant = w.tenants[int(rng.integers(len(w.tenants)))]
        system = prompts[tenant][int(rng.integers(w.prompts_per_tenant))]
        messages = [{"role": "system", "content": system}]
        clock = float(rng.uniform(0, w.duration_s))
        for _ in range(int(rng.geometric(1 / w.mean_turns))):
            messages = [*messages, {"role": "user", "content": text(w.message_words)}]
            answer = text(w.answer_words)
            sent = messages
            if tenant in w.stamped_tenants:
                sent = [{"role": "system", "content": _stamped(w.start_s + clock, system)}]
                sent += messages[1:]
            events.append((clock, tenant, sent, answer))
            messages = [*messages, {"role": "assistant", "content": answer}]
            clock += float(rng.exponential(w.mean_gap_s)) + 1.0
    events.sort(key=lambda e: e[0])
    return [
        {
            "timestamp": round(w.start_s + clock, 3),  # ties replay in line order
            "user": tenant,
            "request": {"model": "synthetic", "messages": messages},
            "response": {
                "id": f"chatcmpl-{i:06d}",
                "choices": [{"message": {"role": "assistant", "content": answer}}],
                "usage": {"completion_tokens": len(answer.split())},
            },
        }
        for i, (clock, tenant, messages, answer) in enumerate(events)
    ]


def _stamped(at_s: float, system: str) -> str:
    """``system`` opened with the time it is sent at, to the millisecond (ISO 8601, UTC)."""
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(round(at_s, 3), UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    return f"Current time: {stamp}Z. {system}"


def _word(i: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = letters[i % 26]
    i //= 26
    while i:
        out += letters[i % 26]
        i //= 26
    return out


def write_lines(path: Path, lines: list[dict]) -> Path:
    """``lines`` as a JSON-lines file at ``path`` (its folder made)."""
    return _write(path, lines)


def _write(path: Path, lines: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    return path
