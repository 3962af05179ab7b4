"""The measured-kernel cost model against real vLLM serving runs: TTFT and TPOT errors.

    python benchmarks/measured_error.py [--write]

Reads ``benchmarks/data/silicon_vllm.csv``: aiconfigurator's real end-to-end vLLM runs
(``silicon_sample.csv``, the aggregated-serving rows on A100/H100/H200/B200; source and commit
in ``benchmarks/data/README.md``), each a closed-loop benchmark at fixed concurrency, prompt
and output length, with its measured mean TTFT and TPOT. For every run the model can express
(a catalog model, TP only: no expert or attention data parallelism; weights at a dtype the
tables measure), it predicts TTFT and TPOT with ``cost/serving.py``'s steady state over

- ``measured``: the measured-kernel step (``cost/measured.py``), its fixed cost per step fitted
  here **leaving out the model being predicted** (fitted on every other model's runs), so no
  run's error is measured with its own run in the fit;
- ``roofline``: the roofline's step form as the fleet prices it (``fleet/stepcost.py``);

and prints, per GPU and model family, the median, p90 and worst relative error of each.

Each run is priced as it was served where its launch script is known
(``benchmarks/data/served.csv``, the benchmark's scripts at the commit of the run's date): the
KV cache's dtype, the scheduler's token budget, and the MoE kernel where the script chose
another than the GPU's table holds (its curves in ``benchmarks/data/moe_served.json``, from
``benchmarks/kernels/reduce_served.py``), and the prompt and output lengths at the mean of
the client's draw. Elsewhere: bf16 KV unless the weights are fp8 or fp4, a budget of 8,192
tokens (vLLM's default on GPUs of 70 GiB and more), the table's kernel, the lengths recorded.

``--write`` fits the fixed cost on all runs and writes ``prefixscope/data/kernels/fixed.json``
with the error table it came with (what ``plan`` reads as the model's error);
``--write-error`` writes the error alone, keeping the file's fixed costs.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl

from prefixscope.analysis.cost import kernels
from prefixscope.analysis.cost.costmodel import nnls
from prefixscope.analysis.cost.deployment import Deployment, memory_split
from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.measured import Fixed, covers, fixed_costs, measured_model
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.cost.serving import BUDGET_TOKENS, steady_state, wave
from prefixscope.analysis.fleet.stepcost import from_roofline

HERE = Path(__file__).parent
RUNS = HERE / "data" / "silicon_vllm.csv"
SERVED = HERE / "data" / "served.csv"
SERVED_MOE = HERE / "data" / "moe_served.json"
OUT = Path("prefixscope/data/kernels/fixed.json")
#: model path in the runs → (catalog model, family)
MODELS = {
    "meta-llama/Llama-3.1-70B": ("llama-3.1-70b", "Llama-3.1-70B"),
    "nvidia/Llama-3.1-8B-Instruct-FP8": ("llama-3.1-8b", "Llama-3.1-8B"),
    "Qwen/Qwen3-32B": ("qwen3-32b", "Qwen3-32B"),
    "Qwen/Qwen3-235B-A22B-FP8": ("qwen3-235b-a22b", "Qwen3-235B (MoE)"),
    "openai/gpt-oss-120b": ("gpt-oss-120b", "gpt-oss-120b (MoE)"),
    "MiniMaxAI/MiniMax-M2.5": ("minimax-m2.5", "MiniMax-M2.5 (MoE)"),
    "moonshotai/Kimi-K2.5": ("kimi-k2", "Kimi-K2.5 (MoE, MLA)"),
}
GPU_OF = {"a100_sxm": "a100", "h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200"}


@dataclass(frozen=True)
class Run:
    id: str
    gpu: str
    model: str
    family: str
    tp: int
    dtype: str | None  # the weights' dtype override, None: as published
    concurrency: int
    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float
    kv_dtype: str = "bf16"  # fp8 runs keep their KV cache in fp8 too
    budget: int = BUDGET_TOKENS  # max_num_batched_tokens
    moe_kernel: str = "table"  # the GPU's table, or a curve of moe_served.json
    script: str = ""  # the launch script that set these, "" where not known
    range_ratio: float = 1.0  # the client drew each length from [range_ratio · X, X]

    @property
    def mean_isl(self) -> int:
        """The prompts' mean length, what the run is priced at: (1 + r)/2 of the nominal."""
        return round(self.isl * (1 + self.range_ratio) / 2)

    @property
    def mean_osl(self) -> int:
        return round(self.osl * (1 + self.range_ratio) / 2)


def served_settings() -> dict[tuple[str, str, str], dict]:
    """(model path, system, vLLM version or "") → what the run's launch script set."""
    frame = pl.read_csv(SERVED, schema_overrides={"backend_version": pl.String})
    return {
        (r["model_path"], r["system"], r["backend_version"] or ""): r
        for r in frame.iter_rows(named=True)
    }


def as_served(run: Run, row: dict, served: dict) -> Run:
    """``run`` with its launch script's KV dtype, token budget and MoE kernel, where known."""
    got = served.get((row["model_path"], row["system"], row["backend_version"] or ""))
    if got is None:
        return run
    budget = 2 * run.isl if got["budget"] == "2x-isl" else int(got["budget"])
    return replace(run, kv_dtype=got["kv_dtype"], budget=budget, moe_kernel=got["moe"],
                   range_ratio=float(got["random_range_ratio"]),
                   script=f"{got['script']}@{got['commit'][:8]}")  # fmt: skip


class ServedKernels:
    """A GPU's tables with one fused-MoE curve swapped for the kernel a run was served with."""

    def __init__(self, tables: kernels.Kernels, curves: list[dict]) -> None:
        self._tables, self._curves = tables, curves

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._tables, name)

    def moe(self, tokens, hidden: int, inter: int, topk: int, experts: int, tp: int, dtype: str):
        for c in self._curves:
            # the run's TP group holds the experts: sharded (moe_tp) or whole (moe_ep)
            shape = (c["hidden"], c["inter"], c["topk"], c["experts"], c["moe_tp"] * c["moe_ep"])
            if shape == (hidden, inter, topk, experts, tp):
                xs = np.asarray(c["tokens"], np.float64)
                return kernels.interp(tokens, xs, np.asarray(c["ms"], np.float64), 1.0)
        raise KeyError(f"no served MoE curve for {hidden}×{inter}, top {topk}, TP {tp}")


@functools.cache
def _served_moe() -> tuple[dict, ...]:
    return tuple(json.loads(SERVED_MOE.read_text())["curves"])


def served_curves(kernel: str) -> list[dict]:
    return [c for c in _served_moe() if c["kernel"] == kernel]


def dtype_of(row: dict, model: str) -> tuple[str | None, str | None]:
    """The weights' dtype for the measured tables, or (None, why not)."""
    gemm = row["gemm_quant_mode"] or row["precision"] or "bf16"
    if gemm in ("fp8", "fp8_block"):
        return ("fp8" if model in ("llama-3.1-70b", "llama-3.1-8b") else None), None
    if model == "gpt-oss-120b":  # attention in bf16, experts mxfp4: as published
        return None, None
    if model == "kimi-k2" and row["moe_quant_mode"] == "int4_wo":
        return "int4-experts", None
    if gemm in ("bf16", "bfloat16", "null"):
        return "bf16", None
    return None, f"weights in {gemm}"


def load_runs() -> tuple[list[Run], dict[str, int]]:
    runs, skipped = [], {}
    served = served_settings()
    for row in pl.read_csv(RUNS, infer_schema_length=10000).iter_rows(named=True):

        def skip(why: str) -> None:
            skipped[why] = skipped.get(why, 0) + 1

        if row["model_path"] not in MODELS:
            skip("model not in the catalog")
            continue
        model, family = MODELS[row["model_path"]]
        if (row["moe_ep_size"] or 1) > 1 or (row["attention_dp_size"] or 1) > 1:
            skip("expert or attention data parallelism")
            continue
        if row["batch_size"] is None or row["silicon_ttft_ms"] is None:
            skip("no concurrency or no TTFT")
            continue
        dtype, why = dtype_of(row, model)
        if why:
            skip(why)
            continue
        run = Run(row["id"], GPU_OF[row["system"]], model, family, int(row["tp_size"]), dtype,
                  int(row["batch_size"]), int(row["isl"]), int(row["osl"]),
                  float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"]),
                  "fp8" if (row["precision"] or "") in ("fp8", "fp4") else "bf16")  # fmt: skip
        runs.append(as_served(run, row, served))
    return runs, skipped


def shape_of(run: Run):  # type: ignore[no-untyped-def]
    """The run's model shape and the weights' dtype to price it at: int4 experts (Kimi-K2.5)
    are the shape's own dtype, the rest bf16."""
    shape = resolve_model(run.model)
    if run.dtype == "int4-experts":
        return replace(shape, weight_dtype="bf16", expert_dtype="int4"), None
    return shape, run.dtype


def model_for(run: Run, fixed: Fixed):
    shape, dtype = shape_of(run)
    why = covers(shape, run.gpu, run.tp, dtype)
    if why:
        return None, why
    model = replace(measured_model(shape, run.gpu, run.tp, dtype), fixed=fixed)
    if run.moe_kernel != "table":
        model = replace(model, tables=ServedKernels(model.tables, served_curves(run.moe_kernel)))
    return model, None


def pool_tokens(run: Run) -> float | None:
    """Tokens of KV the replica holds (``deployment.memory_split``, vLLM's sizing), or None
    where the split refuses the run (the run then is not limited here)."""
    shape, dtype = shape_of(run)
    try:
        split = memory_split(
            shape, Deployment(resolve_gpu(run.gpu), run.tp), weight_dtype=dtype,
            kv_dtype=run.kv_dtype,
        )  # fmt: skip
    except ValueError:
        return None
    return float(split.kv_pool_tokens)


def roofline_step(run: Run):
    shape, dtype = shape_of(run)
    c = from_roofline(shape, resolve_gpu(run.gpu), dtype, run.tp)

    def step(decodes: float, keys: float, chunks: list[tuple[float, float]]) -> float:
        m = decodes + sum(n for n, _ in chunks)
        t = c.a + c.b * max(m, c.k1)
        t += decodes * c.e * max(1.0, c.k2) * keys
        for n, cached in chunks:
            t += c.e * max(n, c.k2) * cached + c.f * n * n
        return t

    return step


def kernel_parts(runs: list[Run]) -> tuple[list, dict[str, int]]:
    """Per run, the kernels' TTFT (staggered and in waves) and TPOT with no fixed cost, and
    how many steps' fixed cost each carries (all are linear in it); None where not covered."""
    parts, uncovered = [], {}
    for run in runs:
        model, why = model_for(run, Fixed(0.0, 0.0))
        if model is None:
            uncovered[why] = uncovered.get(why, 0) + 1
            parts.append(None)
            continue
        one = replace(model, fixed=Fixed(1.0, 0.0))  # 1 ms per step: the steps each carries
        row = []
        pool = pool_tokens(run)
        for how in (steady_state, wave):
            base = how(model.step_seconds, run.concurrency, run.mean_isl, run.mean_osl,
                       pool_tokens=pool, budget=run.budget)  # fmt: skip
            plus = how(one.step_seconds, run.concurrency, run.mean_isl, run.mean_osl,
                       pool_tokens=pool, budget=run.budget)  # fmt: skip
            row.append((base.ttft_s * 1e3, (plus.ttft_s - base.ttft_s) * 1e3,
                        base.tpot_s * 1e3, (plus.tpot_s - base.tpot_s) * 1e3))  # fmt: skip
        parts.append((row[0], row[1], model.shape))
    return parts, uncovered


#: Relative error beyond which a run's weight in the fit falls off (Huber's loss): a few runs
#: the model cannot express (a KV pool that queues them, a server out of its regime) would
#: otherwise set the fixed costs for all.
HUBER = 0.3
#: The share of a wave's queueing the fit may choose: 0 (arrivals spread evenly) to 1.
WAVE_SHARES = tuple(np.round(np.linspace(0, 1, 21), 2))


@dataclass(frozen=True)
class Fit:
    fixed: Fixed
    wave_share: float
    request_ms: float = 0.0  # TTFT only: a request's way in and out of the server
    per_kilotoken_ms: float = 0.0  # TTFT only: per 1,000 prompt tokens (tokenising)


def _columns(part, run: Run, share: float):
    (st, st_n, tp, tp_n), (wv, wv_n, wtp, wtp_n), shape = part
    ttft, ttft_n = (1 - share) * st + share * wv, (1 - share) * st_n + share * wv_n
    tpot, tpot_n = (1 - share) * tp + share * wtp, (1 - share) * tp_n + share * wtp_n
    return ((ttft, ttft_n, run.ttft_ms), (tpot, tpot_n, run.tpot_ms)), shape


def fit(rows: list) -> Fit:
    """The wave share (a grid) and α, β, γ (a layer's q and k norms) and the request's own
    costs (≥ 0) minimising Huber's loss of the relative errors of TTFT and TPOT together."""
    best = None
    for share in WAVE_SHARES:
        a, b = [], []
        for part, run in rows:
            cols, shape = _columns(part, run, share)
            layers, qk_norm = shape.num_hidden_layers, shape.qk_norm
            for i, (base, steps, y) in enumerate(cols):
                first = i == 0  # TTFT: the request's own overhead too
                a.append([steps / y, steps * layers / y, first / y, first * run.mean_isl / 1e3 / y,
                          steps * layers * qk_norm / y])  # fmt: skip
                b.append((y - base) / y)
        a_arr, b_arr = np.array(a), np.array(b)
        weight = np.ones(len(b_arr))
        for _ in range(8):  # Huber's weights: a run off by more than HUBER counts linearly
            x = nnls(a_arr * weight[:, None], b_arr * weight)
            residual = np.abs(a_arr @ x - b_arr)
            weight = np.sqrt(1.0 / np.maximum(1.0, residual / HUBER))
        loss = float(
            np.where(residual <= HUBER, residual**2 / 2, HUBER * (residual - HUBER / 2)).sum()
        )
        if best is None or loss < best[0]:
            best = (
                loss,
                Fit(
                    Fixed(float(x[0]), float(x[1]), float(x[4])),
                    float(share),
                    float(x[2]),
                    float(x[3]),
                ),
            )
    assert best is not None
    return best[1]


def predict(part, run: Run, how: Fit) -> tuple[float, float]:
    cols, shape = _columns(part, run, how.wave_share)
    f = how.fixed.ms(shape)
    (ttft, ttft_n, _), (tpot, tpot_n, _) = cols
    front = how.request_ms + how.per_kilotoken_ms * run.mean_isl / 1e3
    return ttft + f * ttft_n + front, tpot + f * tpot_n


def errors_table(runs: list[Run], parts: list) -> tuple[pl.DataFrame, dict]:
    covered = [(p, r) for p, r in zip(parts, runs, strict=True) if p is not None]
    families = sorted({r.family for _, r in covered})
    held: dict[str, Fit] = {}
    for fam in families:
        held[fam] = fit([(p, r) for p, r in covered if r.family != fam])
    records = []
    for p, r in covered:
        ttft, tpot = predict(p, r, held[r.family])
        roof = steady_state(roofline_step(r), r.concurrency, r.mean_isl, r.mean_osl)  # no pool
        records.append({
            "gpu": r.gpu, "family": r.family, "run": r.id,
            "measured_ttft": abs(ttft - r.ttft_ms) / r.ttft_ms * 100,
            "measured_tpot": abs(tpot - r.tpot_ms) / r.tpot_ms * 100,
            "roofline_ttft": abs(roof.ttft_s * 1e3 - r.ttft_ms) / r.ttft_ms * 100,
            "roofline_tpot": abs(roof.tpot_s * 1e3 - r.tpot_ms) / r.tpot_ms * 100,
            "roofline_ttft_ratio": r.ttft_ms / (roof.ttft_s * 1e3),
            "signed_ttft": (ttft - r.ttft_ms) / r.ttft_ms * 100,
            "signed_tpot": (tpot - r.tpot_ms) / r.tpot_ms * 100,
        })  # fmt: skip
    return pl.DataFrame(records), held


def shipped_and_refit(covered: list, whole: Fit) -> tuple[str, str]:
    """Median TTFT and TPOT errors of the fixed costs ``measured`` ships and of ``whole``, the
    fit on all the ``covered`` runs, each run priced with a fit it is part of (in-sample,
    unlike the table)."""
    data = fixed_costs()
    d = data["default"]
    ship = Fit(
        Fixed(d["alpha_ms"], d["beta_ms"], d.get("qk_norm_ms", 0.0)),
        data["wave_share"],
        data["request_ms"],
        data["per_kilotoken_ms"],
    )
    out = []
    for how in (ship, whole):
        pairs = [(predict(p, r, how), (r.ttft_ms, r.tpot_ms)) for p, r in covered]
        errs = np.abs(np.array([g for g, _ in pairs]) / np.array([w for _, w in pairs]) - 1) * 100
        ttft, tpot = np.median(errs, axis=0)
        out.append(f"TTFT {ttft:.1f}%, TPOT {tpot:.1f}% (α {how.fixed.alpha_ms:.3f} ms, "
                   f"γ {how.fixed.qk_norm_ms:.4f} ms)")  # fmt: skip
    return out[0], out[1]


def summary(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    aggs = [pl.len().alias("runs")]
    for col in ("measured_ttft", "roofline_ttft", "measured_tpot", "roofline_tpot"):
        aggs += [
            pl.col(col).median().round(1).alias(f"{col} med"),
            pl.col(col).quantile(0.9).round(1).alias(f"{col} p90"),
            pl.col(col).max().round(0).alias(f"{col} worst"),
        ]
    return frame.group_by(by).agg(aggs).sort(by) if by else frame.select(aggs)


def markdown(frame: pl.DataFrame) -> str:
    cols = frame.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.iter_rows():
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT}")
    parser.add_argument(
        "--write-error",
        action="store_true",
        help=f"write only the error to {OUT}, keeping its fitted fixed costs",
    )
    args = parser.parse_args()
    runs, skipped = load_runs()
    parts, uncovered = kernel_parts(runs)
    frame, held = errors_table(runs, parts)
    for fam, how in held.items():
        print(f"  fit without {fam}: α = {how.fixed.alpha_ms:.3f} ms, β = "
              f"{how.fixed.beta_ms:.4f} ms/layer (+ {how.fixed.qk_norm_ms:.4f} with q and k "
              f"norms), wave share {how.wave_share}, request "
              f"{how.request_ms:.1f} ms + {how.per_kilotoken_ms:.2f} ms per 1k tokens")  # fmt: skip
    print(f"runs: {len(runs) + sum(skipped.values())} in the file, {len(runs)} expressible, "
          f"{len(frame)} priced by the measured tables")  # fmt: skip
    priced = set(frame["run"].to_list())
    scripted = [r for r in runs if r.id in priced and r.script]
    print(
        f"  {len(scripted)} priced as their launch script served them "
        f"({sum(r.moe_kernel != 'table' for r in scripted)} on another MoE kernel, "
        f"{sum(r.budget != BUDGET_TOKENS for r in scripted)} at another token budget)"
    )
    for why, n in sorted({**skipped, **uncovered}.items(), key=lambda x: -x[1]):
        print(f"  left out: {n} ({why})")
    pl.Config.set_tbl_rows(100)
    pl.Config.set_tbl_width_chars(250)
    pl.Config.set_tbl_cols(20)
    by_gpu_family = summary(frame, ["gpu", "family"])
    overall = summary(frame, [])
    print(markdown(by_gpu_family))
    print()
    print(markdown(overall))
    med = overall.row(0, named=True)
    print(
        f"\nmedian error, measured: TTFT {med['measured_ttft med']}%, TPOT "
        f"{med['measured_tpot med']}%; roofline: TTFT {med['roofline_ttft med']}%, TPOT "
        f"{med['roofline_tpot med']}%"
    )
    bias = frame.select(pl.col("signed_ttft").median(), pl.col("signed_tpot").median()).row(0)
    print(f"median signed error (prediction − run): TTFT {bias[0]:+.1f}%, TPOT {bias[1]:+.1f}%")
    signed = frame.group_by("gpu", "family").agg(
        pl.col("signed_ttft").median().round(1).alias("TTFT %"),
        pl.col("signed_tpot").median().round(1).alias("TPOT %"),
    )
    print("\nmedian signed error per GPU and family (prediction − run):")
    print(markdown(signed.sort("gpu", "family")))
    covered = [(p, r) for p, r in zip(parts, runs, strict=True) if p is not None]
    whole = fit(covered)
    shipped, refit = shipped_and_refit(covered, whole)
    print(f"\nin-sample (every run in the fit): the shipped fixed costs ({OUT}) {shipped}; "
          f"refitted on these runs {refit}")  # fmt: skip
    step_err = frame.select(
        pl.concat_list("measured_ttft", "measured_tpot").explode().quantile(0.9)
    ).item()
    error = {
        "ttft_median": med["measured_ttft med"],
        "ttft_p90": med["measured_ttft p90"],
        "tpot_median": med["measured_tpot med"],
        "tpot_p90": med["measured_tpot p90"],
        "p90": round(float(step_err), 1),
    }
    if args.write_error and not args.write:
        payload = json.loads(OUT.read_text())
        payload["error_pct"] = error
        payload["error_command"] = "python benchmarks/measured_error.py --write-error"
        OUT.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote the error to {OUT}: {error}; its fixed costs kept")
    if args.write:
        fixed = whole.fixed
        payload = {
            "what": "fixed cost per step, ms: alpha_ms + (beta_ms + qk_norm_ms if the model "
            "normalises q and k) × layers",
            "fitted_on": f"{len(covered)} vLLM serving runs, benchmarks/data/silicon_vllm.csv",
            "command": "python benchmarks/measured_error.py --write",
            "default": {
                "alpha_ms": round(fixed.alpha_ms, 4),
                "beta_ms": round(fixed.beta_ms, 5),
                "qk_norm_ms": round(fixed.qk_norm_ms, 5),
            },
            "wave_share": whole.wave_share,
            "request_ms": round(whole.request_ms, 2),
            "per_kilotoken_ms": round(whole.per_kilotoken_ms, 3),
            "error_pct": error,
            "sources": kernels.provenance()["commit"],
        }
        OUT.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote {OUT}: α = {fixed.alpha_ms:.3f} ms, β = {fixed.beta_ms:.4f} ms per layer "
              f"(+ {fixed.qk_norm_ms:.4f} with q and k norms), "
              f"wave share {whole.wave_share}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
