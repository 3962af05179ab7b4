"""The benchmark client replayed instead of the wave/spread blend: a negative result, kept so it
can be run again.

    python benchmarks/serving_replay.py

``benchmarks/measured_error.py`` models a closed-loop benchmark as a blend of its two extremes
(``cost/serving.py``). This script replays the client instead, as the runs' harness is
published: InferenceX (the runs whose launch script ``benchmarks/data/served.csv`` names) sends
``10 × c`` requests at once after ``2 × c`` warm-ups with lengths drawn from ``[0.8 X, X]`` (its
launch scripts' ``--num-prompts $((CONC * 10))``, ``--random-range-ratio 0.8``, read by its
``benchmark_serving.py`` as ``randint(int(X · r), X + 1)``); the other runs name no harness and
are replayed as ``vllm bench serve``'s defaults, constant lengths and 1,000 requests. Each runs
through vLLM's scheduler step by step (:func:`schedule`), the schedule is priced afterwards by
the same measured kernels, and TTFT and TPOT are taken as the client takes them. It prints the
median errors of the blend, the replay, and the replay for InferenceX's runs only, each with
the same fit (γ included) leaving each model out. ``benchmarks/RESULTS.md`` has the figures:
the replay is worse, and is not what ``measured_error.py`` uses.

The scheduler replayed:

- a step first gives each running request, in the order they were admitted, what it needs:
  one token to a decoding request, the rest of its prompt (up to the budget left) to one
  still in prefill; then admits waiting requests first come, first served, while the budget
  lasts and the KV pool holds each one's ``prompt + output`` tokens beside those running (the
  pool is reserved whole, so no request is preempted);
- a request's first token comes with the step that finishes its prompt, each later token with
  one decode step; one that has all its tokens leaves at the end of that step, and the client's
  next request, sent then, is seen by the engine after the step under way (at once if idle).

The schedule does not depend on how long a step takes, so it is computed once as records (a
step, or a run of identical decode steps where nothing arrives or finishes) and priced
afterwards, vectorised: TTFT and TPOT are then linear in a fixed cost added to every step.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import measured_error as me  # noqa: E402

from prefixscope.analysis.cost.measured import Fixed  # noqa: E402

#: vLLM's ``max_num_batched_tokens`` for an OpenAI-compatible server on a GPU of 70 GiB or more
#: (``vllm/engine/arg_utils.py``, ``_set_default_args``).
BUDGET_TOKENS = 8192
#: vLLM's ``max_num_seqs`` there (the same function).
MAX_SEQS = 1024


@dataclass(frozen=True)
class Workload:
    """What the benchmark client sends, in order: each request's prompt and output tokens."""

    concurrency: int
    prompts: np.ndarray  # int64
    outputs: np.ndarray  # int64, each ≥ 1


def benchmark_workload(
    concurrency: int, isl: int, osl: int, count: int, range_ratio: float = 1.0, seed: int = 0
) -> Workload:
    """``count`` requests of ``isl`` prompt and ``osl`` output tokens; with ``range_ratio``
    below 1 each length is drawn uniformly from ``[int(X · range_ratio), X]``, as the random
    dataset of ``benchmark_serving.py`` does (the one InferenceX runs with 0.8)."""
    rng = np.random.default_rng(seed)

    def lengths(x: int) -> np.ndarray:
        low = max(1, int(x * range_ratio))
        if low >= x:
            return np.full(count, x, np.int64)
        return rng.integers(low, x + 1, size=count).astype(np.int64)

    return Workload(int(concurrency), lengths(int(isl)), lengths(int(osl)))


@dataclass(frozen=True)
class Schedule:
    """The benchmark's steps, to be priced (:func:`latencies`).

    Per record: ``repeat`` identical steps of ``decodes`` decode tokens at a mean context of
    ``decode_keys``; per prefill chunk, the record it runs in and its ``(new, cached)``
    tokens. Per request: the record after whose end it arrived (-1: at the start), the one
    that ended with its first token and the one that ended with its last.
    """

    repeat: np.ndarray
    decodes: np.ndarray
    decode_keys: np.ndarray
    chunk_record: np.ndarray
    chunk_new: np.ndarray
    chunk_cached: np.ndarray
    arrived_after: np.ndarray
    first_at: np.ndarray
    last_at: np.ndarray
    outputs: np.ndarray
    most_running: int

    @property
    def records(self) -> int:
        return len(self.repeat)

    def step_tokens(self) -> np.ndarray:
        """Tokens each record's step carries (decodes and chunks)."""
        chunks = np.bincount(self.chunk_record, weights=self.chunk_new, minlength=self.records)
        return self.decodes + chunks

    def step_sequences(self) -> np.ndarray:
        """Sequences each record's step samples a token for or prefills."""
        chunks = np.bincount(self.chunk_record, minlength=self.records)
        return self.decodes + chunks


def schedule(
    workload: Workload,
    budget: int = BUDGET_TOKENS,
    pool_tokens: float | None = None,
    max_seqs: int = MAX_SEQS,
    lag: bool = True,
) -> Schedule:
    """Run the benchmark against vLLM's scheduler (the module docstring)."""
    prompts, outputs = workload.prompts, workload.outputs
    n = len(prompts)
    if n == 0:
        raise ValueError("a benchmark of no requests")
    need = prompts + outputs
    if pool_tokens is not None and need.max() > pool_tokens:
        raise ValueError("a request longer than the KV pool never runs")
    arrived_after = np.full(n, -1, np.int64)
    first_at = np.full(n, -1, np.int64)
    last_at = np.full(n, -1, np.int64)
    repeat, decodes, decode_keys = [], [], []
    chunk_record, chunk_new, chunk_cached = [], [], []
    waiting = list(range(min(workload.concurrency, n)))  # first come, first served
    sent = len(waiting)
    running = np.zeros(0, np.int64)  # admission order
    done = np.zeros(n, np.int64)  # prompt tokens computed
    made = np.zeros(n, np.int64)  # output tokens produced
    reserved = 0.0
    most = 0
    sent_now: list[int] = []  # sent at the end of the last record, not yet seen by the engine
    while len(running) or waiting or sent_now:
        record = len(repeat)
        if not len(running) or not lag:  # an idle engine takes a request as it comes
            waiting += sent_now
            sent_now = []
        prefilling = done[running] < prompts[running]
        admissible = (
            bool(waiting)
            and len(running) < max_seqs
            and (pool_tokens is None or reserved + need[waiting[0]] <= pool_tokens)
        )
        if len(running) and not prefilling.any() and not admissible and not sent_now:
            # a run of identical decode steps, to the next request that finishes
            left = outputs[running] - made[running]
            k = int(left.min())
            keys = prompts[running] + made[running]
            repeat.append(k)
            decodes.append(len(running))
            decode_keys.append(float(keys.mean()) + (k - 1) / 2.0)
            made[running] += k
        else:
            room = budget
            stepped_decodes, keys_sum = 0, 0.0
            for i in running.tolist():
                if room <= 0:
                    break
                if done[i] < prompts[i]:
                    take = min(int(prompts[i] - done[i]), room)
                    chunk_record.append(record)
                    chunk_new.append(take)
                    chunk_cached.append(int(done[i]))
                    done[i] += take
                    room -= take
                    if done[i] == prompts[i]:
                        made[i] = 1
                        first_at[i] = record
                else:
                    stepped_decodes += 1
                    keys_sum += float(prompts[i] + made[i])
                    made[i] += 1
                    room -= 1
            admitted = []
            while waiting and room > 0 and len(running) + len(admitted) < max_seqs:
                i = waiting[0]
                if pool_tokens is not None and reserved + need[i] > pool_tokens:
                    break
                waiting.pop(0)
                reserved += float(need[i])
                admitted.append(i)
                take = min(int(prompts[i]), room)
                chunk_record.append(record)
                chunk_new.append(take)
                chunk_cached.append(0)
                done[i] = take
                room -= take
                if take == prompts[i]:
                    made[i] = 1
                    first_at[i] = record
            if admitted:
                running = np.concatenate([running, np.array(admitted, np.int64)])
            repeat.append(1)
            decodes.append(stepped_decodes)
            waiting += sent_now  # the step under way when they came has ended
            sent_now = []
            decode_keys.append(keys_sum / stepped_decodes if stepped_decodes else 0.0)
        most = max(most, len(running))
        finished = running[
            (made[running] >= outputs[running]) & (done[running] >= prompts[running])
        ]
        if len(finished):
            last_at[finished] = record
            for i in finished.tolist():
                reserved -= float(need[i])
                if sent < n:  # the client's next request
                    arrived_after[sent] = record
                    sent_now.append(sent)
                    sent += 1
            running = running[made[running] < outputs[running]]
    return Schedule(
        np.array(repeat, np.int64), np.array(decodes, np.float64),
        np.array(decode_keys, np.float64), np.array(chunk_record, np.int64),
        np.array(chunk_new, np.float64), np.array(chunk_cached, np.float64),
        arrived_after, first_at, last_at, outputs.copy(), most,
    )  # fmt: skip


@dataclass(frozen=True)
class Served:
    ttft_s: float  # mean over the requests
    tpot_s: float  # mean over the requests of more than one output token
    most_running: int  # the most requests the KV pool and the budget let run at once


def latencies(plan: Schedule, step_seconds: np.ndarray) -> Served:
    """Mean TTFT and TPOT of ``plan`` where each record's step takes ``step_seconds``."""
    end = np.cumsum(plan.repeat * np.asarray(step_seconds, np.float64))
    start = np.where(plan.arrived_after < 0, 0.0, end[np.maximum(plan.arrived_after, 0)])
    first, last = end[plan.first_at], end[plan.last_at]
    ttft = float(np.mean(first - start))
    many = plan.outputs > 1
    tpot = (
        float(np.mean((last[many] - first[many]) / (plan.outputs[many] - 1))) if many.any() else 0.0
    )
    return Served(ttft, tpot, plan.most_running)


def steps_ms(model, plan: Schedule) -> np.ndarray:
    """Each record's one step, ms of its kernels (no fixed cost): the measured model's pieces,
    vectorised over the records."""
    steps = plan.records
    m = plan.step_tokens()
    ms = model.linear_ms(m) + model.decode_attention_ms(plan.decodes, plan.decode_keys)
    if len(plan.chunk_new):
        attention = model.prefill_attention_ms(plan.chunk_new, plan.chunk_cached)
        ms = ms + np.bincount(plan.chunk_record, weights=attention, minlength=steps)
    return ms + model.head_ms(plan.step_sequences())


def inferencex(run: me.Run) -> bool:
    """A run of InferenceX's harness: its launch script is known (``served.csv``)."""
    return bool(run.script)


def workload(run: me.Run) -> Workload:
    if inferencex(run):
        count, ratio = 10 * run.concurrency, run.range_ratio
    else:
        count, ratio = max(1000, run.concurrency), 1.0
    return benchmark_workload(run.concurrency, run.isl, run.osl, count, ratio, seed=0)


def replay_parts(runs: list[me.Run]) -> list:
    """Per run, the replay's TTFT and TPOT in the blend's form (both extremes the replay, so
    any wave share gives it), None where the tables do not cover the run."""
    parts = []
    for run in runs:
        model, _ = me.model_for(run, Fixed(0.0, 0.0))
        if model is None:
            parts.append(None)
            continue
        plan = schedule(workload(run), pool_tokens=me.pool_tokens(run))
        base = latencies(plan, steps_ms(model, plan) / 1e3)
        steps = latencies(plan, np.full(plan.records, 1e-3))  # 1 ms a step: the steps carried
        cols = (base.ttft_s * 1e3, steps.ttft_s * 1e3, base.tpot_s * 1e3, steps.tpot_s * 1e3)
        parts.append((cols, cols, model.shape))
    return parts


def medians(runs: list[me.Run], parts: list) -> tuple[float, float, float]:
    """Median TTFT and TPOT error, %, each model's runs by a fit that left it out, and the
    TTFT median on InferenceX's runs alone."""
    covered = [(p, r) for p, r in zip(parts, runs, strict=True) if p is not None]
    held = {f: me.fit([(p, r) for p, r in covered if r.family != f])
            for f in {r.family for _, r in covered}}  # fmt: skip
    ttft, tpot, ix = [], [], []
    for p, r in covered:
        t, o = me.predict(p, r, held[r.family])
        ttft.append(abs(t - r.ttft_ms) / r.ttft_ms * 100)
        tpot.append(abs(o - r.tpot_ms) / r.tpot_ms * 100)
        if inferencex(r):
            ix.append(ttft[-1])
    return float(np.median(ttft)), float(np.median(tpot)), float(np.median(ix))


def main() -> int:
    runs, _ = me.load_runs()
    blend, _ = me.kernel_parts(runs)
    replay = replay_parts(runs)
    mixed = [r if p is not None and inferencex(run) else p
             for p, r, run in zip(blend, replay, runs, strict=True)]  # fmt: skip
    print("| serving model | TTFT median (InferenceX's runs) | TPOT median |")
    print("|---|---:|---:|")
    variants = (
        ("the blend", blend),
        ("the replay", replay),
        ("the replay for InferenceX's runs, the blend for the rest", mixed),
    )
    for name, parts in variants:
        ttft, tpot, ix = medians(runs, parts)
        print(f"| {name}, with γ | {ttft:.1f}% ({ix:.1f}%) | {tpot:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
