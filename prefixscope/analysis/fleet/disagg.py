"""A disaggregated fleet: prefill replicas hold the prefix cache, decode replicas hold running
requests' KV, and each request's KV moves between them (docs/fleet.md, "Disaggregated
prefill and decode").

- **Prefill pool.** The fleet as :func:`run.simulate_fleet` runs it (routers, caches, engines
  unchanged), every request computing its prompt and its first token and leaving: a prefill
  worker serves each request with one output token, as vLLM's and SGLang's disaggregated
  prefill instances do. Its hit rate is the fleet's: the prefix cache lives here.
- **The KV's move.** All of the prompt's KV (the cached prefix too: the decode side has none
  of it) goes from the prefill replica to a decode replica once the decode replica has room:
  each GPU of the prefill replica sends its share over its own link while each GPU of the
  decode replica takes its share, so the move takes ``input × max(bytes a prefill GPU holds,
  bytes a decode GPU holds) per token / the link's bytes per second`` (:class:`Link`).
- **Decode pool.** ``decode_pool.decode``: a queue for room, then the decode steps. The first
  token reaches the user when the KV lands (TTFT = the prefill replica's TTFT + the wait
  for room + the move); TPOT is the rest of the request's time over ``output − 1``.

With an unbounded link and a decode pool that never waits, the TTFT is the prefill pool's,
step for step: the colocated fleet's prefill alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.fleet.decode_pool import Decoded, DecodePool, decode
from prefixscope.analysis.fleet.run import Engine, Fleet, FleetOutcome, Traffic, simulate_fleet
from prefixscope.analysis.trace.csr import Trace

#: RDMA between nodes, GB/s one way per GPU: one 400 Gb/s ConnectX-7 NIC per GPU in DGX
#: H100, H200 and B200 (NVIDIA's DGX datasheets), one 200 Gb/s ConnectX-6 per GPU in DGX A100.
RDMA_GBPS = {"a100": 25.0}
RDMA_DEFAULT_GBPS = 50.0


@dataclass(frozen=True)
class Link:
    """How the KV moves: ``gbps`` GB/s one way per GPU (``inf``: at once), after
    ``latency_s``."""

    name: str
    gbps: float
    latency_s: float = 0.0

    def check(self) -> None:
        if not (self.gbps > 0) or not (0 <= self.latency_s < math.inf):
            raise ValueError(f"a link moves KV at GB/s above 0 after a latency ≥ 0: {self}")


def link_for(text: str, gpu: GpuSpec | None) -> Link:
    """``rdma`` (between nodes, :data:`RDMA_GBPS`), ``nvlink`` (within a node, the GPU's
    NVLink one way), ``inf`` (unbounded) or a figure in GB/s; ValueError in one line."""
    key = text.strip().lower()
    if key == "rdma":
        name = "" if gpu is None else gpu.name.lower()
        gbps = next((v for k, v in RDMA_GBPS.items() if name.startswith(k)), RDMA_DEFAULT_GBPS)
        return Link("rdma", gbps)
    if key == "nvlink":
        if gpu is None or not gpu.nvlink_gbps:
            raise ValueError(
                f"{'this GPU' if gpu is None else gpu.name} has no NVLink figure — give "
                "--kv-link rdma or GB/s"
            )
        return Link("nvlink", float(gpu.nvlink_gbps))
    if key == "inf":
        return Link("unbounded", math.inf)
    try:
        gbps = float(key)
    except ValueError:
        gbps = math.nan
    if not (0 < gbps < math.inf):
        raise ValueError(f"a KV link is rdma, nvlink, inf or GB/s above 0, got {text!r}")
    return Link(f"{gbps:g} GB/s", gbps)


def transfer_seconds(
    input_tokens: np.ndarray, bytes_per_token_gpu: float, link: Link
) -> np.ndarray:
    """Seconds to move each prompt's KV: ``bytes_per_token_gpu`` is the larger of a prefill
    GPU's and a decode GPU's share of a token's KV (the module docstring)."""
    link.check()
    tokens = np.asarray(input_tokens, np.float64)
    if math.isinf(link.gbps):
        return np.full(len(tokens), link.latency_s)
    return tokens * float(bytes_per_token_gpu) / (link.gbps * 1e9) + link.latency_s


@dataclass(frozen=True, eq=False)
class DisaggOutcome:
    """The prefill pool's outcome (one output token each), the decode pool's, and per
    request: the KV's move (s), TTFT (s: to the KV's landing) and TPOT (s; NaN for one
    output token, and for a request no decode replica can hold)."""

    prefill: FleetOutcome
    decoded: Decoded
    transfer_s: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    decode_wait_s: np.ndarray

    @property
    def span_s(self) -> float:
        """From the first arrival to the last request done."""
        ends = np.concatenate([self.prefill.done_at, self.decoded.done_at])
        ends = ends[np.isfinite(ends)]
        return float(ends.max() - self.prefill.arrival.min()) if len(ends) else 0.0

    def utilisation(self) -> tuple[float, float]:
        """Busy seconds over the span, per replica on average: the prefill pool's and the
        decode pool's."""
        span = self.span_s
        if span <= 0:
            return 0.0, 0.0
        return float(self.prefill.busy.mean() / span), float(self.decoded.busy.mean() / span)


def prefill_only(traffic: Traffic) -> Traffic:
    """Every request with one output token: what a prefill replica serves."""
    return Traffic(np.ones(len(traffic.output_tokens), np.int64), traffic.sessions)


def simulate_disagg(
    trace: Trace,
    traffic: Traffic,
    prefill: Fleet,
    engine: Engine,
    pool: DecodePool,
    link: Link,
    bytes_per_token_gpu: float,
) -> DisaggOutcome:
    """The disaggregated fleet over the whole trace (the module docstring)."""
    pre = simulate_fleet(trace, prefill_only(traffic), prefill, engine)
    ready = pre.arrival + pre.ttft
    move = transfer_seconds(trace.input_tokens, bytes_per_token_gpu, link)
    outputs = np.asarray(traffic.output_tokens, np.int64)
    dec = decode(ready, move, trace.input_tokens, outputs, pool)
    ttft = dec.landed_at - pre.arrival
    many = (outputs >= 2) & ~dec.refused
    tpot = np.full(len(outputs), np.nan)
    tpot[many] = (dec.done_at[many] - dec.landed_at[many]) / (outputs[many] - 1)
    wait = dec.admitted_at - ready
    return DisaggOutcome(pre, dec, move, ttft, tpot, wait)
