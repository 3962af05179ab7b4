"""Dashboards: the warehouse rendered as one self-contained HTML page (no server, no network).

Reads only the warehouse's views (``prefixscope/sql/views``: ``latest_*``, ``trace_summary``)
and renders them through the Jinja templates beside this module, autoescaped; never imports
torch.
"""

from prefixscope.dashboards.report import build_report

__all__ = ["build_report"]
