"""A paged KV cache: per-layer block pools, reference-counted blocks, block tables.

Layout, for every layer: ``k[layer]`` and ``v[layer]`` are ``[num_blocks, block_size, kv_heads,
head_dim]``; a block id names the same block in every layer's pool. A sequence's KV lives in the
blocks its :class:`BlockTable` lists, in order: position ``p`` is slot ``p % block_size`` of
block ``table[p // block_size]``.

Sharing is by reference: :meth:`PagedKVCache.fork` gives a new sequence a table whose leading
entries are the cached blocks themselves, with their reference counts raised; no K or V is
copied. A shared block is never written: a sequence about to write into a partly filled block
that another table also holds gets a private copy of that one block first (copy-on-write), so a
hit can never change what another request sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class BlockTable:
    """One sequence's blocks, in position order, and how many positions hold KV."""

    blocks: list[int] = field(default_factory=list)
    num_tokens: int = 0


class PagedKVCache:
    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        shape = (num_blocks, block_size, kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.block_size = block_size
        self.device = torch.device(device)  # also for a zero-layer cache (the head alone)
        self.refcount = [0] * num_blocks
        # Free blocks, lowest id handed out first (a stack popped from the end).
        self._free = list(range(num_blocks - 1, -1, -1))

    # --- blocks -------------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self.refcount)

    @property
    def num_free(self) -> int:
        return len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_allocate(self, n: int) -> bool:
        return n <= len(self._free)

    def allocate(self, n: int) -> list[int]:
        if not self.can_allocate(n):
            raise MemoryError(f"{n} blocks asked, {len(self._free)} free")
        ids = [self._free.pop() for _ in range(n)]
        for b in ids:
            self.refcount[b] = 1
        return ids

    def release(self, table: BlockTable) -> None:
        """Drop the table's references; a block nobody references returns to the free list."""
        for b in reversed(table.blocks):
            self.refcount[b] -= 1
            assert self.refcount[b] >= 0, f"block {b} released more often than referenced"
            if self.refcount[b] == 0:
                self._free.append(b)
        table.blocks, table.num_tokens = [], 0

    # --- sequences ----------------------------------------------------------------------------
    def fork(self, cached: BlockTable, num_tokens: int | None = None) -> BlockTable:
        """A new table that starts with the first ``num_tokens`` cached positions (all of them
        by default) by reference: the same block ids, reference counts raised, nothing copied."""
        n = cached.num_tokens if num_tokens is None else num_tokens
        if n > cached.num_tokens:
            raise ValueError(f"{n} tokens asked, the cached table holds {cached.num_tokens}")
        shared = cached.blocks[: self.blocks_for(n)]
        for b in shared:
            self.refcount[b] += 1
        return BlockTable(list(shared), n)

    def reserve(self, table: BlockTable, new_tokens: int) -> torch.Tensor:
        """Make room for ``new_tokens`` more positions and return their flat slot indices
        (``block × block_size + offset``) into a pool viewed as ``[blocks × block_size, …]``."""
        start, end = table.num_tokens, table.num_tokens + new_tokens
        if start % self.block_size and self.refcount[table.blocks[-1]] > 1:
            self._copy_on_write(table)
        missing = self.blocks_for(end) - len(table.blocks)
        if missing > 0:
            table.blocks += self.allocate(missing)
        table.num_tokens = end
        return self.slots(table, start, end)

    def slots(self, table: BlockTable, start: int, end: int) -> torch.Tensor:
        """Flat slot indices of positions ``start … end-1`` of the table."""
        pos = torch.arange(start, end, device=self.device)
        blocks = torch.tensor(table.blocks, dtype=torch.long, device=self.device)
        return blocks[pos // self.block_size] * self.block_size + pos % self.block_size

    def _copy_on_write(self, table: BlockTable) -> None:
        old = table.blocks[-1]
        (new,) = self.allocate(1)
        for pool in (*self.k, *self.v):
            pool[new].copy_(pool[old])
        self.refcount[old] -= 1
        table.blocks[-1] = new

    # --- layer views --------------------------------------------------------------------------
    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s K and V pools as ``[blocks × block_size, kv_heads, head_dim]``
        views (the same storage)."""
        k, v = self.k[layer], self.v[layer]
        return k.view(-1, *k.shape[2:]), v.view(-1, *v.shape[2:])
