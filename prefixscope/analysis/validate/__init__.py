"""Validation against the engines: the simulator's hit tokens, request by request, beside the
cached tokens the engines reported (``reported.py``); per lookup the smallest LRU capacity at
which it hits (``depths.py``); the effective capacity that best explains the reports and its
range (``fit.py``); agreement per tenant and the requests that disagree most (``compare.py``);
and the two tables (``tables.py``)."""
