"""A hash-id trace through vLLM's own v1 KVCacheManager and Scheduler: the referee of
``fleet --engine vllm`` (``benchmarks/engine_conformance.py`` runs it; docs/fleet.md).

Runs in a scratch environment with vLLM installed (``make peers``), never in the project's: no
model and no GPU, the scheduler built as vLLM's ``tests/v1/core/utils.py`` builds it, and a
stand-in model runner returning one sampled token per request whose prefill is complete.

Input JSONL lines: ``{"id", "arrival_s", "blocks": [hash ids], "input_tokens",
"output_tokens"}``, optionally ``"answer": [hash ids]`` and ``"answer_from": j``. Block ``j``
with hash id ``h`` becomes ``BLOCK`` tokens that depend on ``h`` alone, its first two spelling
``h`` exactly (so distinct ids never share content), and equal id chains give equal token
prefixes. A request with an answer generates, at position ``p`` in block ``answer_from + k``,
token ``p mod BLOCK`` of block ``answer[k]`` (its next turn's block there), so the blocks vLLM
hashes from its output are the ones its next turn sends back; elsewhere a token of its own.

Modes:
  manager   : requests one at a time: ``get_computed_blocks``, ``allocate_slots`` for the
              whole prompt, ``free``; cached tokens per request.
  scheduler : the Scheduler on a simulated clock, each step priced by prefixscope's own step
              form (``--cost A,B,C,E,F,K1,K2``, ``fleet/stepcost.py``) over the chunks and
              decodes the scheduler formed, so both sides see the same clock.
"""

import argparse
import json
import os
import sys
import time
import zlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

import torch  # noqa: E402
from trace_tokens import PROMPT_VOCAB, TokenMaker, load_jsonl  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

FAKE_MODEL_DIR = os.path.join(
    os.environ.get("TMPDIR", "/tmp"), f"prefixscope-vllm-model-{os.getuid()}"
)  # a config.json alone: the model is never loaded
VOCAB = 65536


# --------------------------------------------------------------------------
# second copies: vLLM never de-duplicates its cache; counted, not changed
# --------------------------------------------------------------------------
COPIES = {"made": 0, "of_prompt_blocks": 0, "hits_on_them": 0}
_COPY_IDS = set()  # block ids cached as a second (or later) copy of their hash
_JUST_MADE = []  # the copies the current cache_full_blocks call made


def _count_copies():
    """Wrap vLLM's ``BlockHashToBlockMap`` and ``BlockPool.cache_full_blocks`` to count the
    blocks cached under a hash already cached (whose, prompt or output) and the lookups that
    find one: what ``fleet --engine vllm``'s second copies stand for (docs/fleet.md)."""
    from vllm.v1.core import block_pool

    cls = block_pool.BlockHashToBlockMap
    insert, get, pop = cls.insert, cls.get_one_block, cls.pop

    def counted_insert(self, key, block):
        first = self._cache.get(key)
        insert(self, key, block)
        if first is not None and first != block.block_id:
            COPIES["made"] += 1
            _COPY_IDS.add(block.block_id)
            _JUST_MADE.append(block.block_id)

    def counted_get(self, key):
        block = get(self, key)
        if block is not None and block.block_id in _COPY_IDS:
            COPIES["hits_on_them"] += 1
        return block

    def counted_pop(self, key, block_id):
        block = pop(self, key, block_id)
        if block is not None:
            _COPY_IDS.discard(block_id)
        return block

    cls.insert, cls.get_one_block, cls.pop = counted_insert, counted_get, counted_pop
    pool_cls = block_pool.BlockPool
    cache_full = pool_cls.cache_full_blocks

    def counted_cache_full(self, request, blocks, num_cached_blocks, num_full_blocks, **kwargs):
        _JUST_MADE.clear()
        cache_full(self, request, blocks, num_cached_blocks, num_full_blocks, **kwargs)
        size = kwargs["block_size"]
        for i in range(num_cached_blocks, num_full_blocks):
            made = blocks[i].block_id in _JUST_MADE
            if made and (i + 1) * size <= request.num_prompt_tokens:
                COPIES["of_prompt_blocks"] += 1

    pool_cls.cache_full_blocks = counted_cache_full


_count_copies()


# --------------------------------------------------------------------------
# trace -> tokens
# --------------------------------------------------------------------------
def gen_token(req_id, pos):
    """Deterministic, request-specific generated token (never EOS-relevant:
    the requests use ignore_eos=True)."""
    return zlib.crc32(f"{req_id}:{pos}".encode()) % PROMPT_VOCAB + PROMPT_VOCAB + 1


# --------------------------------------------------------------------------
# vLLM construction (mirrors tests/v1/core/utils.py::create_scheduler)
# --------------------------------------------------------------------------
def ensure_fake_model(max_len):
    os.makedirs(FAKE_MODEL_DIR, exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 1,
        "vocab_size": VOCAB,
        "max_position_embeddings": max(max_len, 262144),
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    path = os.path.join(FAKE_MODEL_DIR, "config.json")
    old = None
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
    if old != cfg:
        with open(path, "w") as f:
            json.dump(cfg, f, indent=1)


def build(args, max_model_len):
    ensure_fake_model(max_model_len)
    model_config = ModelConfig(
        model=FAKE_MODEL_DIR,
        dtype="float16",
        seed=42,
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=max_model_len,
        long_prefill_token_threshold=0,
        enable_chunked_prefill=True,
        async_scheduling=False,
        is_encoder_decoder=False,
    )
    cache_config = CacheConfig(
        block_size=args.block_size,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=True,
    )
    vllm_config = VllmConfig(
        # No GPU / no CPU build of vLLM: name the device explicitly so the
        # (unspecified) platform does not have to infer it.
        device_config=DeviceConfig(device="cpu"),
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=args.blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                FullAttentionSpec(
                    block_size=args.block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float32,
                ),
            )
        ],
    )
    cache_config.num_gpu_blocks = args.blocks
    sched_bs, hash_bs = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    kv_cache_config.hash_block_size = hash_bs
    kv_cache_config.cache_hit_alignment_tokens = sched_bs
    # Same hasher as EngineCore (cache_config.prefix_caching_hash_algo).
    hash_fn = get_hash_fn_by_name(cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    block_hasher = get_request_block_hasher(hash_bs, hash_fn, vllm_config.num_hash_lookahead_tokens)
    return vllm_config, kv_cache_config, sched_bs, hash_bs, block_hasher


def make_request(r, tm, block_hasher, arrival):
    sp = SamplingParams(
        max_tokens=max(1, int(r["output_tokens"])), ignore_eos=True, temperature=0.0
    )
    return Request(
        request_id=str(r["id"]),
        prompt_token_ids=tm.prompt(r),
        sampling_params=sp,
        pooling_params=None,
        arrival_time=arrival,
        block_hasher=block_hasher,
    )


# --------------------------------------------------------------------------
# mode: manager
# --------------------------------------------------------------------------
def run_manager(args, reqs, tm):
    max_len = max(r["input_tokens"] + r["output_tokens"] for r in reqs) + args.block_size
    vllm_config, kv_cache_config, sched_bs, hash_bs, block_hasher = build(args, max_len)
    mgr = KVCacheManager(
        kv_cache_config=kv_cache_config,
        max_model_len=vllm_config.model_config.max_model_len,
        scheduler_block_size=sched_bs,
        hash_block_size=hash_bs,
        enable_caching=True,
        log_stats=True,
    )
    per_req = []
    tot_in = tot_cached = 0
    failed = 0
    for r in reqs:
        req = make_request(r, tm, block_hasher, r["arrival_s"])
        blocks, n_cached, _ = mgr.get_computed_blocks(req)
        new = mgr.allocate_slots(
            req,
            req.num_tokens - n_cached,
            num_new_computed_tokens=n_cached,
            new_computed_blocks=blocks,
        )
        if new is None:
            failed += 1  # prompt larger than the pool: count as a miss
            n_cached_rec = 0
        else:
            mgr.record_prefix_cache_stats(req, n_cached)
            n_cached_rec = n_cached
            req.num_computed_tokens = req.num_tokens
        mgr.free(req)
        per_req.append(
            {"id": r["id"], "input_tokens": r["input_tokens"], "cached_tokens": n_cached_rec}
        )
        tot_in += r["input_tokens"]
        tot_cached += n_cached_rec
    pcs = mgr.make_prefix_cache_stats()
    return {
        "mode": "manager",
        "num_requests": len(reqs),
        "allocation_failures": failed,
        "total_input_tokens": tot_in,
        "total_cached_tokens": tot_cached,
        "token_hit_rate": tot_cached / tot_in if tot_in else 0.0,
        "vllm_prefix_cache_stats": {
            "requests": pcs.requests,
            "queries": pcs.queries,
            "hits": pcs.hits,
            "hit_rate": pcs.hits / pcs.queries if pcs.queries else 0.0,
        },
        "requests": per_req,
    }


# --------------------------------------------------------------------------
# mode: scheduler
# --------------------------------------------------------------------------
def step_time(sched_out, args):
    """Seconds of one step: prefixscope's step form (``_sched.py``) over what the scheduler
    formed, ``a + b·max(tokens, k1) + Σ (c·ctx + e·max(take, k2)·ctx + f·take²)`` for each
    request scheduled ``take`` tokens after ``ctx`` computed ones (a decode: ``take`` 1);
    without ``--cost``, ``step_fixed_ms`` plus ``step_ms_per_token`` a token."""
    if not args.cost:
        return (
            args.step_ms_per_token * sched_out.total_num_scheduled_tokens + args.step_fixed_ms
        ) / 1000.0
    a, b, c, e, f, k1, k2 = args.cost
    ctx = {nr.req_id: nr.num_computed_tokens for nr in sched_out.scheduled_new_reqs}
    cached = sched_out.scheduled_cached_reqs
    ctx.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
    seconds = a + b * max(sched_out.total_num_scheduled_tokens, k1)
    for rid, take in sched_out.num_scheduled_tokens.items():
        c0 = ctx.get(rid, 0)
        seconds += c * c0 + e * max(take, k2) * c0 + f * take * take
    return seconds


def next_token(rid, pos, answers, tm):
    """The token a request generates at position ``pos``: its answer's where it has one."""
    first, answer = answers.get(rid, (0, ()))
    k = pos // tm.block - first
    if 0 <= k < len(answer):
        return tm.block_tokens(answer[k])[pos % tm.block]
    return gen_token(rid, pos)


def fake_model_runner(scheduler, sched_out, answers, tm):
    """One sampled token per scheduled request that has finished its prefill
    (num_computed_tokens was already advanced by schedule()); [] for a
    request still in a non-final prefill chunk."""
    req_ids = list(sched_out.num_scheduled_tokens.keys())
    sampled = []
    for rid in req_ids:
        req = scheduler.requests[rid]
        if req.num_computed_tokens >= req.num_tokens:
            sampled.append([next_token(rid, req.num_tokens, answers, tm)])
        else:
            sampled.append([])
    return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled), req_ids, sampled


def run_scheduler(args, reqs, tm):
    max_len = max(r["input_tokens"] + r["output_tokens"] for r in reqs) + args.block_size
    vllm_config, kv_cache_config, sched_bs, hash_bs, block_hasher = build(args, max_len)
    scheduler = Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=sched_bs,
        hash_block_size=hash_bs,
        log_stats=True,
    )
    pool = scheduler.kv_cache_manager.block_pool
    n_blocks = args.blocks
    answers = {str(r["id"]): (r["answer_from"], r["answer"]) for r in reqs if r.get("answer")}

    info = {}  # id -> per-request record
    live = {}  # id -> Request (until finished)
    pcs_tot = dict(
        requests=0, queries=0, hits=0, preempted_requests=0, preempted_queries=0, preempted_hits=0
    )
    t = 0.0
    i = 0
    n = len(reqs)
    steps = 0
    used_time_integral = 0.0
    max_used = 0
    wall0 = time.time()
    last_log = wall0
    n_finished = 0

    def used_blocks():
        # blocks held by requests (free queue includes evictable cached blocks;
        # the null block is never free)
        return n_blocks - 1 - pool.get_num_free_blocks()

    while n_finished < n:
        while i < n and reqs[i]["arrival_s"] <= t + 1e-12:
            r = reqs[i]
            req = make_request(r, tm, block_hasher, r["arrival_s"])
            live[req.request_id] = req
            info[req.request_id] = {
                "id": r["id"],
                "arrival_s": r["arrival_s"],
                "input_tokens": r["input_tokens"],
                "output_tokens": r["output_tokens"],
                "cached_tokens": None,
                "prefill_stats_cached": None,
                "num_preemptions": 0,
                "first_token_s": None,
                "ttft_s": None,
                "finish_s": None,
            }
            scheduler.add_request(req)
            i += 1
        if not scheduler.has_unfinished_requests():
            if i >= n:
                break
            t = max(t, reqs[i]["arrival_s"])  # idle: blocks used = 0
            continue

        out = scheduler.schedule()
        if out.total_num_scheduled_tokens == 0:
            # nothing fits / nothing runnable: jump to next arrival
            if i < n:
                u = used_blocks()
                used_time_integral += u * (reqs[i]["arrival_s"] - t)
                t = max(t, reqs[i]["arrival_s"])
                scheduler.update_from_output(out, ModelRunnerOutput(req_ids=[]))
                continue
            raise RuntimeError(f"scheduler stalled at t={t:.3f} with {len(live)} live requests")
        for nr in out.scheduled_new_reqs:
            rec = info[nr.req_id]
            if rec["cached_tokens"] is None:
                rec["cached_tokens"] = nr.num_computed_tokens
                ps = live[nr.req_id].prefill_stats
                if ps is not None:
                    rec["prefill_stats_cached"] = ps.num_cached_tokens
        u = used_blocks()
        max_used = max(max_used, u)
        dt = step_time(out, args)
        used_time_integral += u * dt
        t += dt
        steps += 1

        mro, req_ids, sampled = fake_model_runner(scheduler, out, answers, tm)
        for rid, s in zip(req_ids, sampled, strict=True):
            if s and info[rid]["first_token_s"] is None:
                info[rid]["first_token_s"] = t
                info[rid]["ttft_s"] = t - info[rid]["arrival_s"]
        eco_map = scheduler.update_from_output(out, mro)
        for eco in eco_map.values():
            st = eco.scheduler_stats
            if st is not None and st.prefix_cache_stats is not None:
                p = st.prefix_cache_stats
                for k in pcs_tot:
                    pcs_tot[k] += getattr(p, k)
            for o in eco.outputs:
                if o.finish_reason is not None:
                    req = live.pop(o.request_id)
                    rec = info[o.request_id]
                    rec["num_preemptions"] = req.num_preemptions
                    rec["finish_s"] = t
                    rec["generated_tokens"] = req.num_output_tokens
                    n_finished += 1
        if args.progress and time.time() - last_log > 30:
            last_log = time.time()
            print(
                f"[{time.time() - wall0:7.1f}s wall] sim t={t:9.2f}s steps={steps} "
                f"arrived={i}/{n} finished={n_finished} running={len(scheduler.running)} "
                f"waiting={len(scheduler.waiting)} used={u}",
                file=sys.stderr,
                flush=True,
            )

    per_req = [info[str(r["id"])] for r in reqs]
    tot_in = sum(r["input_tokens"] for r in reqs)
    tot_cached = sum(x["cached_tokens"] or 0 for x in per_req)
    return {
        "mode": "scheduler",
        "num_requests": n,
        "steps": steps,
        "sim_time_s": t,
        "wall_time_s": time.time() - wall0,
        "params": {
            "blocks": args.blocks,
            "block_size": args.block_size,
            "max_num_batched_tokens": args.max_num_batched_tokens,
            "max_num_seqs": args.max_num_seqs,
            "step_ms_per_token": args.step_ms_per_token,
            "step_fixed_ms": args.step_fixed_ms,
            "cost": args.cost,
        },
        "vllm_prefix_cache_stats": dict(
            pcs_tot, hit_rate=pcs_tot["hits"] / pcs_tot["queries"] if pcs_tot["queries"] else 0.0
        ),
        "first_admission_cached_tokens": tot_cached,
        "first_admission_token_hit_rate": tot_cached / tot_in if tot_in else 0.0,
        "total_preemptions": sum(x["num_preemptions"] for x in per_req),
        "time_weighted_mean_blocks_used": used_time_integral / t if t > 0 else 0.0,
        "max_blocks_used": max_used,
        "second_copies": dict(COPIES),
        "requests": per_req,
    }


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--trace", required=True, help="driver JSONL")
    ap.add_argument("--mode", choices=["manager", "scheduler"], required=True)
    ap.add_argument("--blocks", type=int, required=True, help="KV pool size (blocks)")
    ap.add_argument("--block-size", type=int, default=512)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--step-ms-per-token", type=float, default=0.02)
    ap.add_argument("--step-fixed-ms", type=float, default=5.0)
    ap.add_argument(
        "--cost", type=lambda t: [float(x) for x in t.split(",")], help="A,B,C,E,F,K1,K2 (s)"
    )
    ap.add_argument("--limit", type=int, default=0, help="use first N requests only")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    reqs = load_jsonl(args.trace)
    if args.limit:
        reqs = reqs[: args.limit]
    ids = [str(r["id"]) for r in reqs]
    if len(set(ids)) != len(ids):
        sys.exit("duplicate request ids")
    tm = TokenMaker(args.block_size)
    t0 = time.time()
    res = run_manager(args, reqs, tm) if args.mode == "manager" else run_scheduler(args, reqs, tm)
    res["trace"] = os.path.abspath(args.trace)
    res["vllm_version"] = __import__("vllm").__version__
    res["torch_version"] = torch.__version__
    res["elapsed_wall_s"] = time.time() - t0
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    summary = {k: v for k, v in res.items() if k != "requests"}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
