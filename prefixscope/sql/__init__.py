"""SQL lives in ``.sql`` files beside this module: ``schema/`` (one table a file, applied in name
order), ``ingest/`` (per-format line parsers), ``marts/`` (views the report reads)."""

from functools import cache
from importlib.resources import files


@cache
def load(name: str) -> str:
    """The text of ``prefixscope/sql/<name>.sql``."""
    return (files(__package__) / f"{name}.sql").read_text(encoding="utf-8")


def schema_files() -> list[str]:
    """Names of the table definitions, in the order they must be applied."""
    folder = files(__package__) / "schema"
    return sorted(f"schema/{p.name[:-4]}" for p in folder.iterdir() if p.name.endswith(".sql"))
