"""Shared fixtures. Prefect settings are set here, before anything imports Prefect, so tests
run offline, quietly, and against a throw-away home; the user's config folder (where the
default hash key is made) is a throw-away one too."""

from __future__ import annotations

import atexit
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

_PREFECT_HOME = tempfile.mkdtemp(prefix="prefixscope-prefect-")
os.environ.update(
    {
        "PREFECT_HOME": _PREFECT_HOME,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
        "PREFECT_LOGGING_TO_API_ENABLED": "false",
        "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED": "false",
        "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED": "false",
        # a local cluster's scheduler logs from its own thread, at times after a test's
        # captured output has closed: a traceback in the run's output for an INFO line
        "DASK_LOGGING__DISTRIBUTED": "warning",
        "PREFIXSCOPE_CONFIG_DIR": tempfile.mkdtemp(prefix="prefixscope-config-"),
    }
)
os.environ.pop("PREFECT_API_URL", None)
for _folder in (_PREFECT_HOME, os.environ["PREFIXSCOPE_CONFIG_DIR"]):
    atexit.register(shutil.rmtree, _folder, ignore_errors=True)
# the session's own default hash key, made before any command would make it and say so; fixed,
# so that what samples blocks by their (keyed) hash draws the same sample every run
_KEY = Path(os.environ["PREFIXSCOPE_CONFIG_DIR"]) / "hash.key"
_KEY.write_bytes(bytes(range(100, 132)))
_KEY.chmod(0o600)

import duckdb  # noqa: E402

# Prefect binds its console log handler to sys.stderr when it is first imported. Imported here,
# that is the session's stream; imported first inside a test that captures output (capsys), it
# would be that test's buffer, closed when the test ends, and any later Prefect warning (from a
# background service) would fail to print.
import prefect  # noqa: E402, F401


def _private_randoms() -> None:
    """Background threads draw from the global ``random`` module: the websocket pings of
    Prefect's events client (``websockets``: ``random.getrandbits``), Prefect's jittered
    service intervals, tornado's periodic callbacks and Dask's retries. One such draw while
    Hypothesis draws a case reads to it as the strategy's own ("Do not use the random module
    inside strategies": seen on the fleet's reference test in one full run in three). A draw
    from the module's functions off the main thread comes from a generator of its own instead;
    nothing of ours draws from the global one (every test draws in the main thread)."""
    import random
    import threading

    main, background = threading.main_thread(), random.Random()

    def redirected(name: str) -> Callable[..., Any]:
        own = getattr(random, name)

        def draw(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is main:
                return own(*args, **kwargs)
            return getattr(background, name)(*args, **kwargs)

        return draw

    names = ("random", "getrandbits", "randbytes", "uniform", "randint", "randrange",
             "choice", "choices", "shuffle", "sample", "gauss", "expovariate")  # fmt: skip
    for name in names:
        setattr(random, name, redirected(name))


_private_randoms()

from prefixscope import warehouse  # noqa: E402
from prefixscope.analysis.trace.csr import Trace  # noqa: E402
from prefixscope.analysis.trace.load import load_trace  # noqa: E402
from prefixscope.ingest import IngestResult  # noqa: E402
from tests import warm_kernels  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample" / "mooncake" / "conversation_trace.jsonl.gz"
AGENT_SAMPLE = REPO / "data" / "sample" / "agents" / "claude_code_traces.tar.gz"


#: Under xdist, the files that run whole flows, longest first (cold numba cache, 2 workers, stop
#: 72: the demo's 48 s and its tests, 45 s, 39 s, 25 s); the other flow files follow them.
HEAVY_FLOW_FILES = (
    "test_questions.py",
    "test_dask.py",
    "test_flow_resume.py",
    "test_flow_summary.py",
)
#: Under xdist, this many of the files with the fewest tests run after the flow files: short
#: work that evens out the two workers' ends, where the flow files alone left one worker idle
#: for a minute.
FILLER_FILES = 20


def pytest_configure(config: pytest.Config) -> None:
    """xdist's loadfile sends files in this conftest's order (below), not by its own count of
    tests, which put the few-test flow files last, one after another on one worker."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In one process: the flow tests last, in their order: the Prefect server they share
    (``prefect_server``) stays up, with its client's background threads, until the session
    ends, and every other test runs before it starts. The browser tests side by side, last of
    the others and first of the flow tests, so that they share one Chromium (``browser``).

    Under xdist (``--dist loadfile``, whole files to a worker, the next file to the first
    worker free), each worker has its own Prefect server and Chromium, and what matters is
    that both end together: the files without a flow test, most tests first; then the files
    with one, longest first (:data:`HEAVY_FLOW_FILES`); then the :data:`FILLER_FILES` smallest
    files. The flows run after most kernels are in numba's cache, as in one process."""

    def order(item: pytest.Item) -> tuple[bool, bool]:
        flow = item.get_closest_marker("flow") is not None
        browser = item.get_closest_marker("browser") is not None
        return (flow, browser != flow)

    if not hasattr(config, "workerinput"):  # one process
        items.sort(key=order)
        return
    count = Counter(item.path for item in items)
    flows = {item.path for item in items if item.get_closest_marker("flow") is not None}
    others = sorted((f for f in count if f not in flows), key=lambda f: (-count[f], f.name))
    fillers = set(others[-FILLER_FILES:])

    def rank(f: Path) -> tuple[int, int, int, str]:
        if f in flows:
            heavy = HEAVY_FLOW_FILES.index(f.name) if f.name in HEAVY_FLOW_FILES else 99
            return (1, heavy, -count[f], f.name)
        return (2 if f in fillers else 0, 0, -count[f], f.name)

    items.sort(key=lambda item: rank(item.path))


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (make test installs it)"
)


class _Chromium:
    """One headless Chromium for the session's page tests, started by the first of them and
    stopped before the first other test after them: while Playwright's synchronous API runs,
    its event loop is this thread's, and ``asyncio.run`` (a Prefect flow) would fail."""

    def __init__(self) -> None:
        self._playwright: Any = None
        self.browser: Any = None

    def get(self) -> Any:
        if self.browser is None:
            from playwright.sync_api import sync_playwright

            self._playwright = sync_playwright().start()
            self.browser = self._playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS
            )
        return self.browser

    def close(self) -> None:
        if self.browser is not None:
            self.browser.close()
            self._playwright.stop()
            self.browser = self._playwright = None


_CHROMIUM = _Chromium()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("browser") is None:
        _CHROMIUM.close()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Under xdist, the controller starts the fleet loop's one compile beside the workers
    (xdist starts them last in this hook), and each worker's first call of the loop waits
    for it and loads it from numba's cache, instead of compiling it again
    (``warm_kernels.py``)."""
    config = session.config
    if hasattr(config, "workerinput"):
        warm_kernels.await_in_worker()
    elif getattr(config.option, "numprocesses", None):
        warm_kernels.start()


def pytest_sessionfinish() -> None:
    _CHROMIUM.close()
    warm_kernels.stop()


@pytest.fixture
def browser() -> Any:
    """The session's headless Chromium (tests that use it carry the ``browser`` marker); open
    pages with ``open_page``."""
    return _CHROMIUM.get()


@dataclass
class OpenPage:
    """A page open in Chromium: the tab, errors (console and uncaught), dialogs that opened
    (dismissed), and the URLs it requested."""

    tab: Any
    errors: list[str]
    dialogs: list[str]
    requests: list[str]


@contextmanager
def open_page(
    browser: Any, page: Path, wait_for: str | None = None, width: int = 1400, height: int = 900
) -> Iterator[OpenPage]:
    """``page`` open from disk in a fresh context of ``browser`` at ``width`` × ``height``;
    ``wait_for``: a selector to wait for."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        tab = context.new_page()
        opened = OpenPage(tab, [], [], [])
        tab.on("console", lambda m: opened.errors.append(m.text) if m.type == "error" else None)
        tab.on("pageerror", lambda e: opened.errors.append(str(e)))

        def dismiss(d: Any) -> None:
            opened.dialogs.append(d.message)
            d.dismiss()

        tab.on("dialog", dismiss)
        tab.on("request", lambda r: opened.requests.append(r.url))
        tab.goto(page.as_uri(), wait_until="load")
        if wait_for:  # there, shown or not (a table in a closed <details> is hidden)
            tab.wait_for_selector(wait_for, state="attached", timeout=20_000)
        yield opened
    finally:
        context.close()


@pytest.fixture
def sample_path() -> Path:
    return SAMPLE


@dataclass(frozen=True)
class Bundled:
    """The bundled trace, ingested once for the session by the ingest stage. Open ``path``
    read-only only (``warehouse.connect(path, read_only=True)``), and close the connection
    before the test ends; a test that writes works on ``copy_to(tmp_path)``."""

    path: Path
    result: IngestResult

    def copy_to(self, folder: Path) -> Path:
        """A copy of the warehouse file in ``folder`` that a test may write to."""
        target = folder / "bundled.duckdb"
        shutil.copy(self.path, target)
        return target


@pytest.fixture(scope="session")
def bundled_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Bundled:
    """The bundled trace (12,031 requests), ingested once per test session."""
    from prefixscope.stages import ingest

    path = tmp_path_factory.mktemp("bundled") / "bundled.duckdb"
    result = ingest.ingest_logs(path, ingest.IngestSettings((str(SAMPLE),), "mooncake"))
    return Bundled(path, result)


@pytest.fixture(scope="session")
def bundled_trace(bundled_warehouse: Bundled) -> Trace:
    """The bundled warehouse's requests as a trace, loaded once per session (treat it as
    read-only)."""
    with warehouse.connect(bundled_warehouse.path, read_only=True) as con:
        return load_trace(con)


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[None]:
    """Prefect's local server, started once per session for the flow tests (it takes tens of
    seconds to start on a small machine)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


#: `make demo`'s command line, less its paths.
DEMO = (
    "fleet-report --input {sample} --tenant kimi --synthetic-tenants chat,search,agent "
    "--isolation shared,salted --agent-input {agents} --agent-tenant claude-code "
    "--agent-arrival uniform:20m --warehouse {wh} --out {page}"
)


@dataclass(frozen=True)
class DemoRun:
    """`make demo`'s command, run once: where it wrote the warehouse and the page, its exit
    status, and everything it printed (stdout and stderr together, as a terminal shows them).
    Open ``warehouse`` read-only only; a test that writes works on a copy."""

    warehouse: Path
    page: Path
    returncode: int
    stdout: str


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The demo, run once per test run in a subprocess as a user's shell runs it (a whole
    fleet_report flow: a minute or so). Under xdist the workers share it: the first to need it
    runs it under a file lock in the run's own temporary folder, the others read what it left
    (its warehouse and page are only read; a test that writes works on a copy). Tests that use
    it carry the ``flow`` and ``slow`` markers."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return _run_demo(tmp_path_factory.mktemp("demo"))
    shared = tmp_path_factory.getbasetemp().parent  # the run's folder, above each worker's
    with FileLock(str(shared / "demo.lock")):
        record = shared / "demo" / "run.json"
        if record.exists():
            saved = json.loads(record.read_text())
            return DemoRun(Path(saved["warehouse"]), Path(saved["page"]), saved["returncode"],
                           saved["stdout"])  # fmt: skip
        (shared / "demo").mkdir(exist_ok=True)
        run = _run_demo(shared / "demo")
        saved = {"warehouse": str(run.warehouse), "page": str(run.page)}
        saved |= {"returncode": run.returncode, "stdout": run.stdout}
        record.write_text(json.dumps(saved))
        return run


def _run_demo(folder: Path) -> DemoRun:
    wh, page = folder / "demo.duckdb", folder / "report.html"
    # Prefect's logging as a user's shell has it (the tests quiet it for their own process).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_LOGGING")}
    env.pop("PREFECT_SERVER_LOGGING_LEVEL", None)
    argv = DEMO.format(sample=SAMPLE, agents=AGENT_SAMPLE, wh=wh, page=page).split()
    warm_kernels.wait()  # the flow's processes load the fleet loop, rather than compile it again
    out = subprocess.run(
        [sys.executable, "-m", "prefixscope.cli", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # everything the terminal would show
        text=True,
        timeout=240,
        check=False,
    )
    return DemoRun(wh, page, out.returncode, out.stdout)


@pytest.fixture(scope="session")
def empty_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse with every table and view and no rows, made once per session (creating
    them takes a tenth of a second, copying the file far less)."""
    path = tmp_path_factory.mktemp("empty") / "empty.duckdb"
    warehouse.connect(path).close()
    return path


@pytest.fixture
def wh(tmp_path: Path, empty_warehouse: Path) -> Iterator[tuple[Path, duckdb.DuckDBPyConnection]]:
    """A fresh warehouse file and an open connection to it, as ``warehouse.connect`` opens it
    (the session's empty warehouse, copied)."""
    path = tmp_path / "wh.duckdb"
    shutil.copy(empty_warehouse, path)
    con = duckdb.connect(str(path))
    con.execute("SET TimeZone = 'UTC'")
    yield path, con
    con.close()


#: A Llama-3-8B-like Hugging Face config.json (what ``--model-config`` reads).
LLAMA_8B_CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}


def conversation_lines(count: int, start_every_s: int, turn_every_s: int) -> list[str]:
    """``count`` conversations of three turns as Mooncake lines (512-token blocks, 40 output
    tokens), each opening with the same two-block system prompt and re-sending its earlier
    turns; conversation ``s`` starts at ``s × start_every_s``, its turns ``turn_every_s``
    apart."""
    lines = []
    for s in range(count):
        chain = [1, 2]
        for turn in range(3):
            chain = chain + [s * 100 + turn * 10 + k for k in range(4)]
            at = (s * start_every_s + turn * turn_every_s) * 1000
            lines.append(mooncake_line(at, len(chain) * 512, 40, chain))
    return lines


def mooncake_line(
    timestamp: int = 0,
    input_length: int = 600,
    output_length: int = 10,
    hash_ids: Sequence[int] | None = None,
    block_size: int = 512,
) -> str:
    """A well-formed Mooncake line; ``hash_ids`` defaults to a fresh chain of the right length."""
    if hash_ids is None:
        n = -(-input_length // block_size)
        hash_ids = list(range(n))
    return json.dumps(
        {
            "timestamp": timestamp,
            "input_length": input_length,
            "output_length": output_length,
            "hash_ids": list(hash_ids),
        }
    )


@pytest.fixture
def write_lines(tmp_path: Path) -> Callable[..., Path]:
    """Write raw lines (str or bytes) to a file, gzipped when ``gz``; returns its path."""
    counter = iter(range(10**6))

    def write(lines: Sequence[str | bytes], gz: bool = False, newline_at_end: bool = True) -> Path:
        raw = b"\n".join(x.encode() if isinstance(x, str) else x for x in lines)
        if newline_at_end and lines:
            raw += b"\n"
        path = tmp_path / f"input{next(counter)}.jsonl{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(raw) if gz else raw)
        return path

    return write
