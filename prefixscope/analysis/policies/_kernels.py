"""Every compiled replay loop, by policy name (``lru.py`` and ``others.py`` call them)."""

from prefixscope.analysis.policies._heaps import belady
from prefixscope.analysis.policies._lists import lru, lru_plain
from prefixscope.analysis.policies._pin_sets import pinned_sets

__all__ = ["belady", "lru", "lru_plain", "pinned_sets"]
