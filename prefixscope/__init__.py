"""prefixscope: what a prefix (KV) cache is really worth, from the request logs of a fleet.

Stages hand data to each other as DuckDB tables documented in ``docs/schema.md``:
``ingest`` writes ``requests``/``rejects``/``sources``, ``analysis`` reads ``requests`` and
writes ``hit_rates``, ``dashboards`` reads them all, ``pipelines`` sequences the stages.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("prefixscope")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
