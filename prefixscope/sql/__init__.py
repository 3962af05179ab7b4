"""SQL lives in ``.sql`` files beside this module: ``schema/`` (one table a file, applied in name
order), ``ingest/`` (per-format line parsers), ``views/`` (one view a file, created in the warehouse
under the file's name: what the page and ad-hoc queries read), ``catalog/`` (what the warehouse
itself holds, read when its schema is brought up to date)."""

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


def view_files() -> list[str]:
    """Names of the view definitions, in the order they must be created: a view may read only
    views of files that sort before its own. A leading ``NN_`` orders a file and is not part of
    the view's name (``views/00_fresh_runs`` creates ``fresh_runs``, read by every
    ``latest_*`` view)."""
    folder = files(__package__) / "views"
    return sorted(f"views/{p.name[:-4]}" for p in folder.iterdir() if p.name.endswith(".sql"))
