"""A Hugging Face ``config.json`` read key by key: what ``--model-config`` takes.

Every key a shape needs is checked where it is read, so that a wrong file stops the command
with one line naming the file and the key, rather than dividing by zero or sizing a cache at a
negative number of bytes. The bounds are far beyond any published model (Llama-3.1-405B: 126
layers, hidden 16,384, 128 heads; DeepSeek-V3: kv_lora_rank 512) and below what would overflow
a byte count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefixscope.textfile import read_text

#: The largest config file read: published ones are a few KB.
MAX_BYTES = 16 * 2**20
#: key: (smallest, largest) integer it may hold.
BOUNDS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 10_000),
    "hidden_size": (1, 2**20),
    "intermediate_size": (1, 2**24),
    "num_attention_heads": (1, 2**16),
    "num_key_value_heads": (1, 2**16),
    "head_dim": (1, 2**16),
    "vocab_size": (0, 2**31),
    "kv_lora_rank": (1, 2**20),
    "qk_rope_head_dim": (0, 2**16),
    "q_lora_rank": (1, 2**20),
    "qk_nope_head_dim": (0, 2**16),
    "v_head_dim": (1, 2**16),
    # mixture of experts, in each family's spelling (EXPERT_KEYS)
    "n_routed_experts": (1, 2**16),
    "num_experts": (1, 2**16),
    "num_local_experts": (1, 2**16),
    "num_experts_per_tok": (1, 2**16),
    "moe_intermediate_size": (1, 2**24),
    "n_shared_experts": (0, 2**16),
    "first_k_dense_replace": (0, 10_000),
    # sliding-window attention
    "sliding_window": (1, 2**31),
    "sliding_window_pattern": (1, 10_000),
}
#: The routed experts' count, in DeepSeek's, Qwen's and Mixtral's (and gpt-oss's) spelling:
#: the first present wins. Mixtral and gpt-oss give no ``moe_intermediate_size``: an expert is
#: ``intermediate_size`` wide there.
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads")
FIX = "give the model's config.json"


def read_config(path: str | Path) -> dict[str, Any]:
    """The language model's keys of ``path`` (a multimodal config's ``text_config``), each
    checked: an integer within ``BOUNDS``, or absent (or null, where a default exists)."""
    raw = _read(path)
    c = _object(raw, path, "the file")
    if "text_config" in c:  # multimodal configs nest the language model's
        c = _object(c["text_config"], path, "key 'text_config'")
    for key in REQUIRED:
        if c.get(key) is None:
            raise ValueError(f"{path} has no {key!r} key: not a transformer config — {FIX}")
    out: dict[str, Any] = {k: _integer(c, k, path) for k in BOUNDS if c.get(k) is not None}
    heads, hidden = out["num_attention_heads"], out["hidden_size"]
    kv_heads = out.setdefault("num_key_value_heads", heads)
    if heads % kv_heads:
        raise ValueError(
            f"{path}: key 'num_key_value_heads' ({kv_heads}) must divide "
            f"'num_attention_heads' ({heads}) — {FIX}"
        )
    if "head_dim" not in out and hidden < heads:
        raise ValueError(
            f"{path}: key 'hidden_size' ({hidden}) is smaller than 'num_attention_heads' "
            f"({heads}), so a head has no dimension — give 'head_dim' or fix the config.json"
        )
    name = c.get("_name_or_path")
    if name is not None and not (isinstance(name, str) and len(name) <= 256 and name.isprintable()):
        raise ValueError(
            f"{path}: key '_name_or_path' must be a printable string of at most 256 characters "
            f"— {FIX}"
        )
    out["name"] = name or None
    _experts(out, path)
    _sliding(c, out, path)
    tied = c.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ValueError(f"{path}: key 'tie_word_embeddings' must be true or false — {FIX}")
    out["tie_word_embeddings"] = tied
    out["qk_norm"] = _qk_norm(c, path)
    return out


#: ``model_type``s whose attention RMS-normalises q and k per head in every layer (vLLM's
#: ``model_executor/models/qwen3.py`` and ``qwen3_moe.py``: ``q_norm``, ``k_norm``).
QK_NORM_TYPES = ("qwen3", "qwen3_moe")


def _qk_norm(c: dict[str, Any], path: str | Path) -> bool:
    """Whether every layer normalises q and k: ``use_qk_norm`` (MiniMax-M2) where the config
    says, else by its ``model_type``."""
    said = c.get("use_qk_norm")
    if said is not None:
        if not isinstance(said, bool):
            raise ValueError(f"{path}: key 'use_qk_norm' must be true or false — {FIX}")
        return said
    return isinstance(c.get("model_type"), str) and c["model_type"] in QK_NORM_TYPES


def _experts(out: dict[str, Any], path: str | Path) -> None:
    """``experts``, ``experts_per_token``, ``moe_intermediate_size``, ``shared_experts`` and
    ``dense_layers`` from whichever spelling the config uses; nothing for a dense model."""
    experts = next((out[k] for k in EXPERT_KEYS if k in out), 0)
    if not experts:
        return
    per_token = out.get("num_experts_per_tok")
    if per_token is None or per_token > experts:
        raise ValueError(
            f"{path}: key 'num_experts_per_tok' must be from 1 to the {experts} experts — {FIX}"
        )
    dense = out.get("first_k_dense_replace", 0)
    if dense > out["num_hidden_layers"]:
        raise ValueError(
            f"{path}: key 'first_k_dense_replace' ({dense}) exceeds 'num_hidden_layers' — {FIX}"
        )
    out.update(
        experts=experts,
        experts_per_token=per_token,
        moe_intermediate_size=out.get("moe_intermediate_size")
        or out.get("intermediate_size", 4 * out["hidden_size"]),
        shared_experts=out.get("n_shared_experts", 0),
        dense_layers=dense,
    )


def _sliding(c: dict[str, Any], out: dict[str, Any], path: str | Path) -> None:
    """``sliding_layers``: the layers that attend through ``sliding_window``. ``layer_types``
    (gpt-oss, Gemma 3) names each layer; else ``sliding_window_pattern`` N (older Gemma 3
    configs) makes every N-th layer full and the others sliding; else a window applies to
    every layer (Mistral-7B v0.1), unless ``use_sliding_window`` is false (Qwen2, whose
    configs carry a window they do not use)."""
    layers, window = out["num_hidden_layers"], out.get("sliding_window")
    if window is None or c.get("use_sliding_window") is False:
        out.pop("sliding_window", None)
        return
    types = c.get("layer_types")
    if types is not None:
        if not (
            isinstance(types, list)
            and len(types) == layers
            and all(t in ("sliding_attention", "full_attention") for t in types)
        ):
            raise ValueError(
                f"{path}: key 'layer_types' must list 'sliding_attention' or 'full_attention' "
                f"for each of the {layers} layers — {FIX}"
            )
        out["sliding_layers"] = types.count("sliding_attention")
    elif "sliding_window_pattern" in out:
        out["sliding_layers"] = layers - layers // out["sliding_window_pattern"]
    else:
        out["sliding_layers"] = layers
    if not out["sliding_layers"]:
        out.pop("sliding_window")


def _read(path: str | Path) -> Any:
    text = read_text(path, MAX_BYTES, "a config.json", FIX)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path} is not JSON ({exc.msg} at line {exc.lineno}): not a config.json — {FIX}"
        ) from None
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply: not a config.json — {FIX}") from None


def _object(value: Any, path: str | Path, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {what} must be a JSON object, got {_kind(value)} — {FIX}")
    return value


def _integer(c: dict[str, Any], key: str, path: str | Path) -> int:
    value = c[key]
    low, high = BOUNDS[key]
    # bool is an int to Python; JSON's true is not a count
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = repr(value) if isinstance(value, int | float) else _kind(value)
        raise ValueError(
            f"{path}: key {key!r} must be an integer from {low:,} to {high:,}, got {shown[:40]} "
            f"— {FIX}"
        )
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    return names.get(type(value), "null" if value is None else "a number")
