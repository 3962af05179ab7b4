"""Synthetic conversation logs with known structure, in the Bailian trace format: the truth
that turn inference is checked against (precision and recall of parent links).

Each tenant (a Bailian ``type``) has a few system prompts, all starting with one preamble
common to every tenant. A session picks a tenant and one of its prompts; turn 1 is the prompt
and a user message; turn k+1 re-sends turn k, its answer and a new message. Sessions start at
random over the trace and their turns interleave. Some turns are *edited*: the user re-sends the
same history with another last message (a second child of the same parent). Some sessions open
with one of a few common messages, so their first turns are identical across sessions. Short system
prompts and short first messages make requests whose full blocks are only shared content: the
case the inference rule must not mistake for a parent.

Token ids are fresh integers; a block's content id names its tokens (equal tokens, equal id,
partial last blocks included), as the published traces do.

:func:`demo_workload` is the multi-tenant demo's log (``make demo``): three tenants beside the
bundled Kimi hour, at its 512-token blocks, whose prompts open with one platform preamble of two
full blocks, so some of their hits are on blocks another tenant put in the cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BAILIAN_TYPES = ("text", "search", "image", "file")


@dataclass(frozen=True)
class Workload:
    sessions: int = 400
    tenants: tuple[str, ...] = BAILIAN_TYPES
    prompts_per_tenant: int = 3
    preamble_tokens: int = 24  # common to every prompt of every tenant
    prompt_tokens: tuple[int, int] = (4, 1200)  # each prompt, beyond the preamble
    message_tokens: tuple[int, int] = (4, 400)
    answer_tokens: tuple[int, int] = (10, 500)
    mean_turns: float = 3.0
    mean_gap_s: float = 60.0
    edit_share: float = 0.05
    common_first_share: float = 0.1  # sessions whose first message is one of a few common ones
    common_messages: int = 5
    duration_s: float = 3600.0
    block_size: int = 16
    start_s: float = 0.0  # added to every timestamp: a later hour of the same service
    first_chat_id: int = 0  # chat ids count from here: a later hour's are new ones


#: The demo's tenants beside the bundled trace (``fleet-report --synthetic-tenants``).
DEMO_TENANTS = ("chat", "search", "agent")


def demo_workload(tenants: tuple[str, ...] = DEMO_TENANTS, block_size: int = 512) -> Workload:
    """About 900 requests a tenant over an hour, with prompts of the bundled trace's scale (a
    few thousand tokens, growing over the turns) at ``block_size``; every prompt opens with a
    preamble of two full blocks common to every tenant."""
    return Workload(
        sessions=300 * len(tenants),
        tenants=tenants,
        preamble_tokens=2 * block_size,
        prompt_tokens=(256, 6000),
        message_tokens=(16, 1500),
        answer_tokens=(50, 800),
        block_size=block_size,
    )


class _Tokens:
    """Fresh token ids, and content ids for blocks of them."""

    def __init__(self) -> None:
        self.next = 0
        self.ids: dict[tuple[int, ...], int] = {}

    def fresh(self, n: int) -> list[int]:
        out = list(range(self.next, self.next + n))
        self.next += n
        return out

    def block_ids(self, tokens: list[int], size: int) -> list[int]:
        return [
            self.ids.setdefault(tuple(tokens[i : i + size]), len(self.ids))
            for i in range(0, len(tokens), size)
        ]


def bailian_lines(workload: Workload, seed: int = 0) -> list[dict]:
    """The log, in arrival order: one dict per request with the Bailian fields."""
    w, rng, tok = workload, np.random.default_rng(seed), _Tokens()

    def length(bounds: tuple[int, int]) -> int:
        return int(rng.integers(bounds[0], bounds[1] + 1))

    preamble = tok.fresh(w.preamble_tokens)
    prompts = {
        t: [preamble + tok.fresh(length(w.prompt_tokens)) for _ in range(w.prompts_per_tenant)]
        for t in w.tenants
    }
    common = [tok.fresh(length(w.message_tokens)) for _ in range(w.common_messages)]
    events = []  # (time, session, turn, tokens, output, parent key, own key)
    for s in range(w.sessions):
        tenant = w.tenants[int(rng.integers(len(w.tenants)))]
        history = list(prompts[tenant][int(rng.integers(w.prompts_per_tenant))])
        clock = float(rng.uniform(0, w.duration_s))
        turns = int(rng.geometric(1 / w.mean_turns))
        parent = None
        for turn in range(1, turns + 1):
            variants = 2 if turn > 1 and rng.random() < w.edit_share else 1
            for v in range(variants):
                if turn == 1 and rng.random() < w.common_first_share:
                    message = common[int(rng.integers(w.common_messages))]
                else:
                    message = tok.fresh(length(w.message_tokens))
                prompt = history + message
                answer = length(w.answer_tokens)
                key = (s, turn, v)
                events.append((clock, tenant, turn, prompt, answer, parent, key))
                clock += float(rng.uniform(1, 20)) if v + 1 < variants else 0.0
            # The conversation goes on from the last variant sent.
            history = prompt + tok.fresh(answer)
            parent = key
            clock += float(rng.exponential(w.mean_gap_s)) + 1.0
    events.sort(key=lambda e: e[0])
    chat_of = {e[6]: i for i, e in enumerate(events)}
    return [
        {
            "chat_id": w.first_chat_id + i,
            "parent_chat_id": -1 if parent is None else w.first_chat_id + chat_of[parent],
            "timestamp": round(w.start_s + clock, 3),
            "input_length": len(prompt),
            "output_length": answer,
            "type": tenant,
            "turn": turn,
            "hash_ids": tok.block_ids(prompt, w.block_size),
        }
        for i, (clock, tenant, turn, prompt, answer, parent, _) in enumerate(events)
    ]


def write_bailian(path: str | Path, workload: Workload, seed: int = 0) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for line in bailian_lines(workload, seed):
            f.write(json.dumps(line) + "\n")
    return path
