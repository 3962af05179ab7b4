"""Capacity flags: a cache's size in blocks, tokens or GiB of a model's KV cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prefixscope.analysis.cost.models import resolve_model


@dataclass(frozen=True)
class Capacities:
    """Capacity flags as given: at most one of them, each a list."""

    blocks: Sequence[int] | None = None
    tokens: Sequence[int] | None = None
    gib: Sequence[float] | None = None
    model: str | None = None
    model_config: str | None = None
    kv_dtype: str = "bf16"

    def resolve(self, block_size: int) -> tuple[list[int], list[float | None]]:
        """Capacities in blocks (whole blocks only: rounded down), and the GiB each came from."""
        given = [x for x in (self.blocks, self.tokens, self.gib) if x]
        if len(given) > 1:
            raise ValueError("give capacities in blocks, tokens or GiB, not several")
        if self.tokens:
            small = [t for t in self.tokens if t < block_size]
            if small:
                raise ValueError(
                    f"capacity {small[0]} tokens is less than one block ({block_size})"
                )
            return [t // block_size for t in self.tokens], [None] * len(self.tokens)
        if self.gib:
            shape = resolve_model(self.model, self.model_config)
            blocks = [shape.blocks_in(g, block_size, self.kv_dtype) for g in self.gib]
            if min(blocks) < 1:
                raise ValueError(
                    f"{min(self.gib)} GiB holds no block of {block_size} tokens of {shape.name}"
                )
            return blocks, [float(g) for g in self.gib]
        return list(self.blocks or []), [None] * len(self.blocks or [])

    @property
    def model_name(self) -> str | None:
        if not self.gib:
            return None
        return resolve_model(self.model, self.model_config).name


def capacities_in_blocks(
    block_size: int, capacity_blocks: Sequence[int] | None, capacity_tokens: Sequence[int] | None
) -> list[int]:
    """Capacities in blocks; a token capacity holds only whole blocks (rounded down)."""
    return Capacities(capacity_blocks, capacity_tokens).resolve(block_size)[0]
