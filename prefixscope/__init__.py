"""prefixscope: what a prefix (KV) cache is really worth, from the request logs of a fleet.

Stages hand data to each other as DuckDB tables documented in ``docs/schema.md``. ``ingest``
turns logs into ``requests``/``rejects``/``sources``; ``analysis`` is the pure computation
over a trace; ``stages`` runs each step (load, compute, append under one recorded run);
``dashboards`` renders the warehouse's views; ``pipelines`` sequences the stages as a Prefect
flow and ``cli`` is the command line over the same stages.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("prefixscope")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
