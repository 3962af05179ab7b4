"""The engines' own counts of prefix-cache hits (``requests.reported_cached_tokens``), aligned
with a trace, and the granularity they are compared at."""

from __future__ import annotations

import math
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow.compute as pc

from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.load import REPLAY_ORDER

#: ``tokens`` of a request whose log line carries no count.
MISSING = -1


@dataclass(frozen=True)
class Reported:
    """Per request of a trace (replay order), the cached tokens its engine reported
    (int64; :data:`MISSING` where the log says nothing)."""

    tokens: np.ndarray

    @property
    def present(self) -> np.ndarray:
        return self.tokens != MISSING

    def beyond_prompt(self, input_tokens: np.ndarray) -> np.ndarray:
        """Reports of more cached tokens than the prompt has (``input_tokens``, not its
        block-rounded size): no cache could have served them, so they say nothing of one."""
        return self.tokens > input_tokens

    def usable(self, input_tokens: np.ndarray) -> np.ndarray:
        """Reports a cache could have given: 0 up to the prompt's tokens. Only these are
        compared and fitted; a count outside that is not a report of a cache."""
        return (self.tokens >= 0) & (self.tokens <= input_tokens)


def load_reported(con: duckdb.DuckDBPyConnection, trace: Trace) -> Reported:
    """``reported_cached_tokens`` in the replay order of ``load_trace`` (checked by request
    id when the trace has them)."""
    rows = con.sql(
        f"SELECT request_id, reported_cached_tokens FROM requests ORDER BY {REPLAY_ORDER}"
    ).to_arrow_table()
    if rows.num_rows != trace.n_requests:
        raise ValueError("the warehouse changed while it was read: run the command again")
    if trace.request_ids is not None and not rows["request_id"].combine_chunks().equals(
        trace.request_ids
    ):
        raise ValueError("the warehouse changed while it was read: run the command again")
    tokens = pc.fill_null(rows["reported_cached_tokens"], MISSING).to_numpy()
    return Reported(np.asarray(tokens, dtype=np.int64))


#: Distinct non-zero counts needed before their common divisor is taken for the engine's
#: block size: with fewer, a divisor such as 4,096 may be a coincidence of a few prompts.
MIN_DISTINCT_COUNTS = 8


def engine_block_size(reported: Reported) -> int | None:
    """The granularity of the reports: the greatest common divisor of the non-zero counts (an
    engine reports whole blocks of its own block size). None with fewer than
    :data:`MIN_DISTINCT_COUNTS` distinct non-zero counts."""
    counts = np.unique(reported.tokens[reported.present & (reported.tokens > 0)])
    return int(np.gcd.reduce(counts)) if len(counts) >= MIN_DISTINCT_COUNTS else None


def comparison_unit(block_size: int, engine_block_size: int | None) -> int:
    """Tokens both sides are rounded down to before they are compared: the least common
    multiple of the warehouse's and the engine's block sizes (a simulated hit of finer blocks
    than the engine's could not have been reported, and a reported hit that ends inside a
    warehouse block cannot be simulated)."""
    return math.lcm(block_size, engine_block_size or block_size)


def floor_to(tokens: np.ndarray, unit: int) -> np.ndarray:
    """``tokens`` rounded down to a multiple of ``unit`` (missing counts stay missing)."""
    return np.where(tokens == MISSING, MISSING, tokens // unit * unit)
