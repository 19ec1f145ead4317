"""Run ``reconf`` in this process, and die as ``kill -9`` would right after a reconfiguration journals a step's end.

    python -m tests.integration.kill_after_step STEP [reconf arguments ...]

The fault goes in through the reconfigurer's own ``after_step`` hook, so production code holds no kill switch.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from dagster_reconf.cli import main
from dagster_reconf.core.reconfig import Reconfigurer


def die_after(step: str) -> None:
    """Make every Reconfigurer built from now on exit at once (status 137, no cleanup) after ``step``'s end."""
    original = Reconfigurer.__init__

    def init(self: Reconfigurer, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        chained = self.after_step

        def after_step(name: str) -> None:
            if name == step:
                os._exit(137)
            if chained is not None:
                chained(name)

        self.after_step = after_step

    Reconfigurer.__init__ = init  # type: ignore[method-assign]


if __name__ == "__main__":
    die_after(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
