"""What every chart of the page shares: its palette, its base layout, names shown as text, and
a figure as markup."""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
from markupsafe import Markup

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")


def plotly_text(text: str) -> str:
    """``text`` as Plotly shows it literally: Plotly renders some HTML (<b>, <br>, <a>, entities)
    in titles, legend entries, annotations and hover labels, so markup is escaped."""
    return html.escape(text, quote=False)


def base_layout(
    title: str, x_title: str, *, log_x: bool = False, height: int = 420, **extra: Any
) -> dict[str, Any]:
    """The layout every chart of the page shares: token hit rate on y from 0, ``title`` and
    ``x_title`` as plain text (escaped here), the same margins."""
    xaxis: dict[str, Any] = {"title": plotly_text(x_title)}
    if log_x:
        xaxis["type"] = "log"
    return {
        "title": plotly_text(title),
        "xaxis": xaxis,
        "yaxis": {"title": "token hit rate", "tickformat": ".0%", "rangemode": "tozero"},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 60, "b": 50},
        **extra,
    }


def figure_markup(fig: go.Figure) -> Markup:
    """A figure as page markup (plotly.js is embedded once, in the page's head)."""
    return Markup(fig.to_html(full_html=False, include_plotlyjs=False))
