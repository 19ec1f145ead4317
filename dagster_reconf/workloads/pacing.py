"""When the bundled generators offer their events: a wall-clock anchor kept in the stream's work directory.

At time ``t`` a generator offers ``start_index + (t - start_time) * rate`` events, so a
stream that falls behind (or is paused) builds a real backlog, as it would on Kafka. The
anchor outlives restarts; when the rate (or its steps, ``rate_steps``) changes, the events
offered so far are kept (no jump, no gap) and the new rate counts from now.

No pydantic here: the generated sources' readers pace by it in Spark's Python planner process, started anew with every
query (its imports are part of each query's start).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from dagster_reconf.core.store.atomic import replace_text

__all__ = ["PacingAnchor", "offered_since", "pacing_anchor", "parse_rate_steps"]

ANCHOR_FILE = "pacing.json"


@dataclass(frozen=True)
class PacingAnchor:
    """Events ``start_index`` were offered at ``start_time``; ``rate`` more every second since."""

    start_time: float
    start_index: int
    rate: float
    rate_steps: str | None = None

    def offered(self, now: float, max_events: int | None = None) -> int:
        paced = self.start_index + max(0, math.floor(offered_since(now - self.start_time, self.rate, self.rate_steps)))
        return paced if max_events is None else min(max_events, paced)


def pacing_anchor(
    work_dir: Path,
    rate: float,
    *,
    rate_steps: str | None = None,
    max_events: int | None = None,
    update: bool = True,
    now: float | None = None,
) -> PacingAnchor:
    """The stream's anchor at ``rate`` (and ``rate_steps``): created on first use, moved to now when they changed
    (if ``update``)."""
    path = Path(work_dir) / ANCHOR_FILE
    now = time.time() if now is None else now
    if path.is_file():
        anchor = PacingAnchor(**json.loads(path.read_text()))
        if (anchor.rate, anchor.rate_steps) == (rate, rate_steps) or not update:
            return anchor
        anchor = PacingAnchor(now, anchor.offered(now, max_events), rate, rate_steps)
    else:
        anchor = PacingAnchor(now, 0, rate, rate_steps)
    replace_text(path, json.dumps(asdict(anchor)))
    return anchor


def parse_rate_steps(text: str | None) -> list[tuple[float, float]]:
    """``'SECONDS:RATE,...'`` as ``[(seconds, rate), ...]``.

    Raises:
        ValueError: a step that is not ``SECONDS:RATE`` with seconds >= 0 in increasing order and a rate > 0.
    """
    steps = []
    for item in (part.strip() for part in (text or "").split(",") if part.strip()):
        seconds, sep, rate = item.partition(":")
        try:
            step = (float(seconds), float(rate))
        except ValueError:
            step = None
        if not sep or step is None or step[0] < 0 or step[1] <= 0 or (steps and step[0] <= steps[-1][0]):
            raise ValueError(
                f"rate step {item!r} is not SECONDS:RATE with SECONDS >= 0, increasing, and RATE > 0 "
                "(e.g. '60:500,180:250')"
            )
        steps.append(step)
    return steps


def offered_since(elapsed: float, rate: float, steps: str | None) -> float:
    """Events offered ``elapsed`` seconds after pacing began at ``rate``, changed by ``steps``
    (:func:`parse_rate_steps`)."""
    total, since, current = 0.0, 0.0, rate
    for at, new_rate in parse_rate_steps(steps):
        if elapsed <= at:
            break
        total += (at - since) * current
        since, current = at, new_rate
    return total + max(0.0, elapsed - since) * current
