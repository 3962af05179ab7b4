"""A time limit for a benchmark: a shape that would not finish in time is cut, not the run.

Before a shape starts, its time is predicted as its roofline time (miss and hit together) times
the ratio of measured wall time to roofline time of the shape before it (``slowdown``, an
assumed ``initial_slowdown`` before the first). The grid runs smallest first, so the shape
before is the nearest in size: a small shape's fixed costs (launches, graph capture) make its
ratio larger than a large one's, so the prediction errs long, never short. A shape whose
prediction would cross the limit is skipped and recorded. The prediction covers the timed runs
and their warm-ups, graph capture included, because the wall time it learns from does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Budget:
    limit_s: float | None  # None: no limit
    initial_slowdown: float = 4.0
    started: float = field(default_factory=time.perf_counter)
    slowdown: float = 0.0  # wall / roofline of the shape measured last

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def predict(self, roofline_s: float) -> float:
        return roofline_s * (self.slowdown or self.initial_slowdown)

    def allows(self, roofline_s: float) -> bool:
        """Whether a shape of this roofline time is predicted to end within the limit."""
        return self.limit_s is None or self.elapsed() + self.predict(roofline_s) <= self.limit_s

    def record(self, wall_s: float, roofline_s: float) -> None:
        if roofline_s > 0:
            self.slowdown = wall_s / roofline_s
