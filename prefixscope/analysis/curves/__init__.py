"""Curves: the token hit rate at every capacity. Exact for LRU in one pass (``stack.py``), the
simulator at a grid of capacities for other policies, or estimated from a block or family
sample; ``compute.py`` picks which."""
