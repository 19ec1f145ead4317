"""When the bundled generators offer their events: a wall-clock anchor kept in the stream's work directory.

At time ``t`` a generator offers ``start_index + (t - start_time) * rate`` events, so a
stream that falls behind (or is paused) builds a real backlog, as it would on Kafka. The
anchor outlives restarts; when the rate changes, the events offered so far are kept
(no jump, no gap) and the new rate counts from now.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["PacingAnchor", "pacing_anchor"]

ANCHOR_FILE = "pacing.json"


@dataclass(frozen=True)
class PacingAnchor:
    """Events ``start_index`` were offered at ``start_time``; ``rate`` more every second since."""

    start_time: float
    start_index: int
    rate: float

    def offered(self, now: float, max_events: int | None = None) -> int:
        paced = self.start_index + max(0, math.floor((now - self.start_time) * self.rate))
        return paced if max_events is None else min(max_events, paced)


def pacing_anchor(work_dir: Path, rate: float, *, max_events: int | None = None, update: bool = True,
                  now: float | None = None) -> PacingAnchor:
    """The stream's anchor at ``rate``: created on first use, moved to now when the rate changed (if ``update``)."""
    path = Path(work_dir) / ANCHOR_FILE
    now = time.time() if now is None else now
    if path.is_file():
        anchor = PacingAnchor(**json.loads(path.read_text()))
        if anchor.rate == rate or not update:
            return anchor
        anchor = PacingAnchor(now, anchor.offered(now, max_events), rate)
    else:
        anchor = PacingAnchor(now, 0, rate)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(anchor)))
    os.replace(tmp, path)
    return anchor
