"""A hash-id trace as token ids, for the engines' own code (``vllm_driver.py``,
``sglang_driver.py``): block ``j`` with hash id ``h`` becomes ``block`` tokens that depend on
``h`` alone, its first two spelling ``h`` exactly, so distinct ids never share content and
equal id chains give equal token prefixes. No dependency beyond the standard library: the
drivers run in the engines' scratch environments."""

import json

PROMPT_VOCAB = 30000  # prompt tokens in [1, 30000]; generated in (30000, 60000]


def load_jsonl(path):
    reqs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                reqs.append(json.loads(line))
    reqs.sort(key=lambda r: r["arrival_s"])  # stable: file order on ties
    return reqs


class TokenMaker:
    """Block with hash id h -> BLOCK tokens that depend on h only."""

    def __init__(self, block):
        self.block = block
        self._cache = {}

    def block_tokens(self, h):
        t = self._cache.get(h)
        if t is None:
            t = [h // PROMPT_VOCAB + 1, h % PROMPT_VOCAB + 1] + [
                (h * 7 + i) % PROMPT_VOCAB + 1 for i in range(2, self.block)
            ]
            self._cache[h] = t
        return t

    def prompt(self, r):
        n = r["input_tokens"]
        if len(r["blocks"]) * self.block < n:
            raise ValueError(f"request {r['id']}: {len(r['blocks'])} blocks < {n} tokens")
        toks = []
        for h in r["blocks"]:
            toks.extend(self.block_tokens(h))
            if len(toks) >= n:
                break
        return toks[:n]
