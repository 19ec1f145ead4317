"""When the bundled generators offer their events: a wall-clock anchor kept in the stream's work directory.

At time ``t`` a generator offers ``start_index + (t - start_time) * rate`` events, so a
stream that falls behind (or is paused) builds a real backlog, as it would on Kafka. The
anchor outlives restarts; when the rate (or its steps, ``rate_steps``) changes, the events
offered so far are kept (no jump, no gap) and the new rate counts from now.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from dagster_reconf.core.store.atomic import replace_text
from dagster_reconf.workloads.options import offered_since

__all__ = ["PacingAnchor", "pacing_anchor"]

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
