"""Benchmark: the report page as it opens, in headless Chromium, from disk.

    .venv/bin/python benchmarks/page_load.py --warehouse build/demo.duckdb [--runs 7]

Renders the page of a warehouse (``make demo``'s by default: the same page a run writes), then
opens it ``--runs`` times at 1,400 × 900, each in a fresh browser context: the seconds from
navigation to every chart drawn and every table set up (those of closed sections are set up
when opened) (``performance.now()``), the height of
the page as it opens (``scrollHeight``), its size, its charts and tables, and the most rows a
table shows. Prints the median and the range; the page's own test holds it under 3 s and
9,000 px. Chromium is Debian's (``make browser``).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from prefixscope import warehouse
from prefixscope.dashboards import build_report

READY = (
    "() => [...document.querySelectorAll('table[id]')].every(t =>"
    " t.classList.contains('dataTable') || t.closest('details:not([open])'))"
    " && [...document.querySelectorAll('.js-plotly-plot')].every(p => p.querySelector('.main-svg'))"
)
ROWS = (
    "Math.max(0, ...[...document.querySelectorAll('table.dataTable')].map(t =>"
    " [...t.querySelectorAll('tbody tr')].filter(r => r.offsetParent !== null).length))"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", default="build/demo.duckdb")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    if not Path(args.warehouse).exists():
        raise SystemExit(f"page_load: no warehouse at {args.warehouse}: run `make demo` first")
    folder = Path(tempfile.mkdtemp(prefix="prefixscope-page-"))
    try:
        page = folder / "report.html"
        started = time.perf_counter()
        with warehouse.connect(args.warehouse, read_only=True) as con:
            build_report(con, page, Path(args.warehouse).name)
        rendered = time.perf_counter() - started
        loads, heights = [], set()
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"]
            )
            for _ in range(args.runs):
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                tab = context.new_page()
                tab.goto(page.as_uri(), wait_until="load")
                tab.wait_for_function(READY, timeout=30_000)
                loads.append(tab.evaluate("performance.now()") / 1e3)
                heights.add(tab.evaluate("document.documentElement.scrollHeight"))
                charts = tab.locator(".js-plotly-plot").count()
                tables = tab.locator("table.dataTable").count()
                rows = tab.evaluate(ROWS)
                context.close()
            browser.close()
        print(
            f"page {page.stat().st_size / 1e6:.1f} MB, rendered in {rendered:.2f} s; "
            f"{charts} charts, {tables} tables (at most {rows} rows shown); "
            f"height at 1,400 x 900: {', '.join(f'{h:,}' for h in sorted(heights))} px"
        )
        print(
            f"load (navigation to charts drawn and tables set up), {args.runs} runs: median "
            f"{statistics.median(loads):.2f} s, {min(loads):.2f}–{max(loads):.2f} s"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
