"""Every compiled replay loop, by policy name (``lru.py`` and ``others.py`` call them)."""

from prefixscope.analysis.policies._heaps import belady, s3fifo
from prefixscope.analysis.policies._lists import fifo, lfu, lru, lru_plain

__all__ = ["belady", "fifo", "lfu", "lru", "lru_plain", "s3fifo"]
