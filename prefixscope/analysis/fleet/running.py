"""A replica's time-weighted statistics of its running blocks, from the loop's sums and
histogram (``_records.Replicas``: ``running_s``, ``cached_s``, ``hist``), and its requests'
lookups after a preemption."""

from __future__ import annotations

import numpy as np

from prefixscope.analysis.fleet import _records


def per_busy(weighted: np.ndarray, busy: np.ndarray) -> np.ndarray:
    return np.divide(weighted, busy, out=np.zeros_like(weighted), where=busy > 0)


def weighted_p95(hist: np.ndarray, width: int) -> np.ndarray:
    """Per replica, the p95 of a histogram of seconds by running blocks (``width`` blocks a
    bucket; a bucket stands for its lowest count): the smallest count whose bucket and those
    below hold 95% of the seconds. 0 for a replica that never stepped."""
    total = hist.sum(axis=1)
    out = np.zeros(hist.shape[0], np.float64)
    for i in range(hist.shape[0]):
        if total[i] > 0:
            below = np.cumsum(hist[i])
            out[i] = float(np.argmax(below >= 0.95 * total[i]) * width)
    return out


def preempted(req, code: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The outcome's ``preempted`` (n × 3): the pools' counts; under ``ideal``, which never
    preempts, zeros that take no memory (a read-only view of one row), as the SLO search keeps
    many outcomes of millions of requests."""
    if code == _records.IDEAL:
        return np.broadcast_to(np.zeros((1, 3), np.int64), (len(req.pre_n), 3))
    return np.stack([req.pre_n, req.pre_q, req.pre_h], 1)
