"""Dashboards: the warehouse rendered as one self-contained HTML page (no server, no network).

Reads only warehouse tables (through ``prefixscope/sql/marts``); never imports torch.
"""

from prefixscope.dashboards.report import build_report

__all__ = ["build_report"]
