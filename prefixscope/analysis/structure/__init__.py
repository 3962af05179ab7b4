"""Structure: conversation turns (from the log, or inferred), shared prefixes and pins, where
hits come from, what breaks reuse and how soon blocks are reused."""
