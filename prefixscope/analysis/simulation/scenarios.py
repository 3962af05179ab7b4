"""What one simulation runs: every policy × capacity × isolation (a :class:`Scenario` each),
and the :class:`Settings` they share."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.isolation import ISOLATIONS


@dataclass(frozen=True)
class Scenario:
    """One cache configuration: a policy, a capacity in blocks (None for unbounded policies,
    with the GiB it came from, if any) and how tenants share it."""

    policy: str
    capacity_blocks: int | None
    capacity_gib: float | None = None
    isolation: str = "shared"


@dataclass(frozen=True)
class Settings:
    """What every scenario of one simulation shares."""

    windows: tuple[str, ...] = ("all",)
    ttl_s: float | None = None
    pin_file: str | None = None
    pin_top: int | None = None
    quota_file: str | None = None
    model: str | None = None
    kv_dtype: str | None = None
    bucket_s: float = 300.0
    outcomes: bool = False
    #: Where the caches started (``trace/warm.py``'s label) and the requests replayed before
    #: the measured trace, never measured (0: a cold start).
    warm_start: str = "cold"
    warm_requests: int = 0


def scenarios(
    policies: Iterable[str],
    capacities_blocks: Sequence[int],
    isolations: Sequence[str] = ("shared",),
    capacities_gib: Sequence[float | None] | None = None,
) -> list[Scenario]:
    """Every policy × capacity × isolation; an unbounded policy once per isolation."""
    gibs = list(capacities_gib) if capacities_gib else [None] * len(capacities_blocks)
    out: list[Scenario] = []
    for mode in isolations:
        if mode not in ISOLATIONS:
            raise ValueError(f"unknown isolation {mode!r}; known: {', '.join(ISOLATIONS)}")
    for name in policies:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
        for mode in isolations:
            if POLICIES[name].bounded:
                if not capacities_blocks:
                    raise ValueError(f"policy {name!r} needs at least one capacity")
                out += [
                    Scenario(name, int(c), g, mode)
                    for c, g in zip(capacities_blocks, gibs, strict=True)
                ]
            elif mode != "partitioned":  # an infinite cache cut in parts is the same cache
                out.append(Scenario(name, None, None, mode))
    for s in out:
        if s.capacity_blocks is not None and s.capacity_blocks < 1:
            raise ValueError(f"capacity must be at least one block, got {s.capacity_blocks}")
    return out
