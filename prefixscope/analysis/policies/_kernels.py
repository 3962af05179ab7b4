"""Every compiled replay loop, by policy name (``lru.py`` and ``others.py`` call them)."""

from prefixscope.analysis.policies._heaps import belady
from prefixscope.analysis.policies._lists import fifo, lfu, lru, lru_plain
from prefixscope.analysis.policies._pin_sets import pinned_sets
from prefixscope.analysis.policies._s3fifo import s3fifo

__all__ = ["belady", "fifo", "lfu", "lru", "lru_plain", "pinned_sets", "s3fifo"]
