"""Eviction policies, each a strategy behind :class:`~.base.Policy`, looked up by name.

All of them obey the request cycle of ``docs/simulation.md``: a request's hit is the leading run
of its blocks found in the cache when it arrives, and afterwards all its blocks are cached.
"""

from prefixscope.analysis.policies.base import Outcome, Policy, PolicyOptions
from prefixscope.analysis.policies.ceiling import Ceiling
from prefixscope.analysis.policies.fifo import FIFO
from prefixscope.analysis.policies.lfu import LFU
from prefixscope.analysis.policies.lru import LRU, TTL, Pinned
from prefixscope.analysis.policies.others import Belady
from prefixscope.analysis.policies.rows import RowPolicy
from prefixscope.analysis.policies.s3fifo import S3FIFO
from prefixscope.analysis.policies.sessions import Liveness, SessionLRU

POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Ceiling(), LRU(), FIFO(), LFU(), TTL(), S3FIFO(), Belady(), Pinned(), SessionLRU(),
        Liveness(),
    )
}  # fmt: skip


def row_policies() -> dict[str, RowPolicy]:
    """The registry's row policies (``rows.py``) when asked, in its order: a policy added to
    ``POLICIES`` is among them."""
    return {name: p for name, p in POLICIES.items() if isinstance(p, RowPolicy)}


def label(name: str) -> str:
    """How the plan's words name policy ``name``: its registry entry's ``label``, else the
    name itself (a warehouse's rows may name a policy this build does not register)."""
    policy = POLICIES.get(name)
    return (policy.label if policy is not None else "") or name


__all__ = ["POLICIES", "Outcome", "Policy", "PolicyOptions", "label", "row_policies"]
