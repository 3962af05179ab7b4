"""Analysis: replay the canonical ``requests`` table through simulated prefix caches.

Never imports torch: the cache simulator and everything it reports run on a machine with
only the analysis dependencies installed.
"""
