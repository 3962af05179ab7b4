"""Eviction policies, each a strategy behind :class:`~.base.Policy`, looked up by name.

All of them obey the lookup rule of ``docs/simulation.md``: a request's hit is the leading run
of its blocks found in the cache when it arrives, and afterwards all its blocks are cached.
"""

from prefixscope.analysis.policies.base import Policy
from prefixscope.analysis.policies.ceiling import Ceiling
from prefixscope.analysis.policies.lru import LRU

POLICIES: dict[str, Policy] = {p.name: p for p in (Ceiling(), LRU())}

__all__ = ["POLICIES", "Policy"]
