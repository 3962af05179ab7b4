"""What one curve computation is asked for: policy, windows, isolation, points, sampling."""

from __future__ import annotations

from dataclasses import dataclass

from prefixscope.analysis.curves.sampling import threshold
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.isolation import ISOLATIONS
from prefixscope.analysis.trace.windows import STEADY, check_windows


@dataclass(frozen=True)
class BlockRule:
    """What a block sample keeps whole (every reference) besides its hashed subset
    (``block_sampling.py``, "Blocks kept whole")."""

    head: int = 0  # the blocks at the first `head` positions of every request
    hot: bool = False  # the blocks with at least HOT_SHARE of the sample's expected lookups


#: Block samples by name: blocks by hash with the trace's hot blocks kept whole (the default:
#: on a trace without one it is plain); blocks by hash; and with the first block of every
#: request kept whole.
BLOCK_RULES = {
    "block-hot": BlockRule(hot=True),
    "block": BlockRule(),
    "block-head": BlockRule(head=1),
}
#: What a sample keeps: blocks (above), or whole prefix families (``sampling.py``).
SAMPLE_BY = (*BLOCK_RULES, "family")
DEFAULT_SAMPLE_BY = "block-hot"
#: Log-spaced points of a one-pass curve (it costs nothing to add more), and of a grid curve
#: (each point is a full replay).
STACK_POINTS = 256
GRID_POINTS = 24


@dataclass(frozen=True)
class CurveSettings:
    """What one curve computation needs besides the trace."""

    policy: str = "lru"
    windows: tuple[str, ...] = ("all",)
    isolation: str = "shared"
    points: int | None = None  # log-spaced points (default: STACK_POINTS or GRID_POINTS)
    capacities: tuple[int, ...] = ()  # capacities asked for, in blocks of the full trace
    sample_rate: float = 1.0
    sample_by: str = DEFAULT_SAMPLE_BY  # what a sample keeps: blocks or whole prefix families
    model: str | None = None
    model_config: str | None = None
    kv_dtype: str = "bf16"
    quota_file: str | None = None
    ttl_s: float | None = None
    workers: int | None = None  # grid curves: processes (default: one per core)
    dask_address: str | None = None  # grid curves: a running Dask cluster's scheduler instead

    def check(self) -> None:
        if self.policy not in POLICIES or not POLICIES[self.policy].bounded:
            bounded = ", ".join(n for n, p in POLICIES.items() if p.bounded and n != "pinned")
            raise ValueError(f"a curve needs a bounded policy ({bounded}), got {self.policy!r}")
        if self.policy == "pinned":
            raise ValueError("pinned has no curve: its pins must fit every capacity")
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"unknown isolation {self.isolation!r}")
        check_windows(self.windows)
        if STEADY in self.windows and self.isolation == "partitioned":
            raise ValueError("a steady window per capacity is not defined for partitioned curves")
        if self.sample_rate < 1:
            threshold(self.sample_rate)  # in (0, 1] and drawable: before the trace is read
        elif self.sample_rate != 1:
            raise ValueError(f"a sample rate is in (0, 1], got {self.sample_rate}")
        if self.sample_by not in SAMPLE_BY:
            raise ValueError(f"sample_by is one of {SAMPLE_BY}, got {self.sample_by!r}")
        if self.by_block:
            # Block sampling estimates stack depths, so it answers the stack algorithm only; a
            # per-capacity warm-up and per-tenant caches would need their own estimators.
            if not self.stack:
                raise ValueError("block sampling estimates the lru curve; use --sample-by family")
            if STEADY in self.windows or self.isolation == "partitioned":
                raise ValueError(
                    "a block-sampled curve has windows all and last-half, shared or salted; "
                    "use --sample-by family or the exact curve"
                )

    @property
    def stack(self) -> bool:
        return self.policy == "lru"

    @property
    def by_block(self) -> bool:
        return self.sample_rate < 1 and self.sample_by in BLOCK_RULES

    @property
    def block_rule(self) -> BlockRule:
        """What a block sample keeps whole (nothing for any other curve)."""
        return BLOCK_RULES.get(self.sample_by, BlockRule())

    @property
    def head(self) -> int:
        """Leading blocks of each request a block sample keeps whole."""
        return self.block_rule.head

    @property
    def hot(self) -> bool:
        """Whether a block sample keeps the trace's hot blocks whole."""
        return self.block_rule.hot

    @property
    def n_points(self) -> int:
        return self.points or (STACK_POINTS if self.stack else GRID_POINTS)
