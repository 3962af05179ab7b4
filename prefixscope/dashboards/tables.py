"""The page's tables as DataTables (bundled by ``itables``, inlined once: the page stays one
file that opens from disk with no network): at most :data:`PAGE_ROWS` rows as the page opens,
the rest a page or a search away, every column sortable.

Cells are text: ``itables`` escapes ``&``, ``<`` and ``>`` in them (``allow_html`` stays off),
so a name with markup shows as itself."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
from itables import javascript as itables_js
from itables import options as itables_options
from itables.version import __version__ as itables_version
from markupsafe import Markup

#: Rows a table shows as the page opens; the length menu offers more.
PAGE_ROWS = 20
LENGTHS = [10, 20, 50, 100, -1]


def datatables_script() -> Markup:
    """The DataTables bundle, once for the page (inline, as ``itables`` writes it offline), and
    the page's own set-up of tables in closed sections."""
    bundle = itables_js.generate_init_offline_itables_html(itables_options.dt_bundle)
    return WHEN_SHOWN + Markup(bundle)


def datatable(
    columns: Sequence[tuple[str, str, bool]],
    rows: Sequence[Mapping[str, Any]],
    id: str | None = None,
    page_rows: int = PAGE_ROWS,
) -> Markup:
    """``rows`` (dicts of text) as a sortable, searchable table of ``columns`` ((key, header,
    is_text) triples); ``id`` is the table element's."""
    frame = pl.DataFrame(
        {header: [str(r[key]) for r in rows] for key, header, _ in columns},
        schema={header: pl.String for _, header, _ in columns},
    )
    numeric = [i for i, (_, _, text) in enumerate(columns) if not text]
    kwargs: dict[str, Any] = {
        "connected": False,
        "pageLength": min(page_rows, PAGE_ROWS),
        "lengthMenu": LENGTHS,
        "classes": "display compact",
        # Column widths from the browser's own table layout: DataTables' measuring of every
        # column (autoWidth) was most of the page's table set-up time.
        "autoWidth": False,
        "columnDefs": [{"className": "dt-right", "targets": numeric}] if numeric else [],
        "show_dtypes": False,
        "allow_html": False,
    }
    if id is not None:
        kwargs["table_id"] = id
    table_id = itables_js.check_table_id(kwargs.pop("table_id", None), kwargs, df=frame)
    args = itables_js.get_itable_arguments(frame, None, **kwargs)
    # The static preview ``to_html_datatable`` adds would repeat every row outside DataTables'
    # pages; the page needs its scripts anyway (the charts are drawn by one).
    page = itables_js.html_table_from_template(
        table_id=table_id,
        dt_url=args.pop("dt_url"),
        connected=args.pop("connected"),
        display_logo_when_loading=args.pop("display_logo_when_loading", False),
        kwargs=args,
        fallback_html="",
    )
    # Until DataTables draws it, the table says so in plain words (itables' own placeholder
    # links to its site); a table in a closed <details> is set up when that is opened
    # (``WHEN_SHOWN``): most tables start collapsed, and setting them up was most of the time
    # the page took to open.
    if _CREATE not in page:
        raise RuntimeError(f"itables {itables_version} no longer writes {_CREATE!r}")
    page = page.replace(_CREATE, f"prefixscopeWhenShown(table, () => {{ {_CREATE} }});", 1)
    return Markup(_PLACEHOLDER.sub(_LOADING, page, count=1))


_PLACEHOLDER = re.compile(r"<tbody>.*?</tbody>", re.DOTALL)
_LOADING = "<tbody><tr><td>loading the table…</td></tr></tbody>"
_CREATE = "new ITable(table, dt_args);"
#: Runs ``make`` now, or, for an element inside a closed <details>, when that is first opened.
WHEN_SHOWN = Markup(
    """<script>
function prefixscopeWhenShown(element, make) {
  const closed = element.closest("details:not([open])");
  if (!closed) { make(); return; }
  closed.addEventListener("toggle", function once() {
    if (!closed.open) return;
    closed.removeEventListener("toggle", once);
    prefixscopeWhenShown(element, make);
  });
}
</script>"""
)
