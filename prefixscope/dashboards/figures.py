"""What every chart of the page shares: its palettes (one colour per policy on every chart), its
base layout, names shown as text, the selection a chart follows, and a figure as markup."""

from __future__ import annotations

import html
import zlib
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from markupsafe import Markup, escape

#: Colours for things that are not policies (routers, tenants, engines): a list, by position.
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")

#: The one mapping from a policy to its colour, on every chart of the page. Each is distinct;
#: an isolation other than shared keeps its policy's hue with its own dash (DASHES).
POLICY_COLOURS = {
    "ceiling": "#555555",
    "lru": "#1f77b4",
    "fifo": "#ff7f0e",
    "lfu": "#2ca02c",
    "s3fifo": "#9467bd",
    "belady": "#d62728",
    "ttl": "#8c564b",
    "pinned": "#e377c2",
}
#: Policies outside POLICY_COLOURS (plugins, options) take one of these, by a stable hash of
#: their name: none of them is a colour of POLICY_COLOURS.
EXTRA_COLOURS = ("#17becf", "#bcbd22", "#7f3b08", "#00441b", "#f781bf", "#4d4d00")
#: The line dash of each isolation; any other isolation is dotted.
DASHES = {"shared": "solid", "salted": "dash", "isolated": "dashdot"}


def policy_colour(policy: str, options: str | None = None) -> str:
    """The colour of ``policy`` (with its ``options``, which make it another curve) everywhere on
    the page."""
    if options is None and policy in POLICY_COLOURS:
        return POLICY_COLOURS[policy]
    key = policy if options is None else f"{policy} ({options})"
    return EXTRA_COLOURS[zlib.crc32(key.encode()) % len(EXTRA_COLOURS)]


def policy_line(policy: str, isolation: str, options: str | None = None) -> dict[str, str]:
    """A policy's line style: its colour, and its isolation's dash."""
    return {"color": policy_colour(policy, options), "dash": DASHES.get(isolation, "dot")}


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


# --- selection -------------------------------------------------------------------------------
# A chart that follows the page's selectors holds the traces of every choice once; each trace's
# ``meta`` names the choice it belongs to ({"tenant": 0, "window": 1}: option indices, never
# names, so no name reaches the figure's data unescaped), and the layout's ``meta`` lists the
# keys the chart follows and its title for each choice. ``templates/select.js`` shows the traces
# of the selected choice (``Plotly.update``); Python draws the default choice (every index 0),
# so the page is right before any script runs.


def choice_key(choice: Mapping[str, int], keys: Sequence[str]) -> str:
    """The layout's key of one choice: its indices joined, in the order of ``keys``."""
    return "|".join(str(choice[k]) for k in keys)


def selectable(
    fig: go.Figure,
    keys: Sequence[str],
    titles: Mapping[str, str],
    shown: Any = True,
    default: Mapping[str, int] | None = None,
) -> go.Figure:
    """Mark ``fig`` as following the selectors ``keys``: its title per choice (``choice_key``,
    text, escaped here), the default choice's traces visible (as ``shown`` or their own
    ``meta["on"]``) and every other trace hidden. The default choice is every key's first
    option, or ``default``'s (whose selector must say so: ``macros.select``'s ``selected``)."""
    default = choice_key({k: 0 for k in keys} | dict(default or {}), keys)
    for trace in fig.data:
        meta = dict(trace.meta or {})
        meta.setdefault("on", trace.visible if trace.visible is not None else shown)
        trace.meta = meta
        trace.visible = meta["on"] if choice_key(meta, keys) == default else False
    fig.update_layout(
        meta={"select": list(keys), "titles": {k: plotly_text(t) for k, t in titles.items()}},
        title=plotly_text(titles.get(default, "")),
    )
    return fig


#: The plotly.js bundle the page inlines (``vendor/README.md``): its version is the one the
#: Python ``plotly`` writes figures for, and it draws these trace types only.
PLOTLY_VERSION = "4.1.1"
BUNDLE = Path(__file__).parent / "vendor" / f"plotly-basic-{PLOTLY_VERSION}.min.js"
BUNDLED_TRACES = frozenset({"scatter", "bar", "pie"})


@cache
def plotly_bundle() -> str:
    """plotly.js, as the page's head inlines it once."""
    return BUNDLE.read_text(encoding="utf-8")


CONFIG = {"responsive": True}


def figure_markup(fig: go.Figure, defer: bool = False) -> Markup:
    """A figure as page markup (plotly.js is embedded once, in the page's head). ``defer``: for
    a chart in a closed ``<details>``, drawn when it is opened (``select.js``) rather than as
    the page loads; its figure rides in an attribute, escaped. A trace type the bundle cannot
    draw is refused here, not left blank on the page."""
    other = {t.type for t in fig.data} - BUNDLED_TRACES
    if other:
        raise ValueError(
            f"the page's plotly.js bundle draws {sorted(BUNDLED_TRACES)} traces, not "
            f"{sorted(other)}: draw them as one of those, or inline the full bundle"
        )
    if defer:
        height = fig.layout.height or 450
        return Markup(
            f'<div class="plotly-deferred" style="height:{int(height)}px" '
            f'data-figure="{escape(fig.to_json())}"></div>'
        )
    return Markup(fig.to_html(full_html=False, include_plotlyjs=False, config=CONFIG))
