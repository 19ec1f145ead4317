"""Run ``reconf`` in this process, and die as ``kill -9`` would right after a reconfiguration journals a step's end,
or while the driver carries out one of its requests.

    python -m tests.integration.kill_after_step STEP [reconf arguments ...]
    python -m tests.integration.kill_after_step during:METHOD [reconf arguments ...]

The fault goes in through the reconfigurer's own ``after_step`` hook, or around the driver handle's METHOD (its
request to the driver, ``migrate`` say: the process dies a second into it, the request runs on in the driver), so
production code holds no kill switch.
"""

from __future__ import annotations

import os
import sys
import threading
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


def die_during(method: str, after_s: float = 1.0) -> None:
    """Make the driver handle's ``method`` exit this process ``after_s`` into its request to the driver."""
    from dagster_reconf.core.reconfig import DriverStream

    original = getattr(DriverStream, method)

    def call(self: DriverStream, *args: Any, **kwargs: Any) -> Any:
        threading.Timer(after_s, os._exit, (137,)).start()
        return original(self, *args, **kwargs)

    setattr(DriverStream, method, call)


if __name__ == "__main__":
    where = sys.argv[1]
    die_during(where.removeprefix("during:")) if where.startswith("during:") else die_after(where)
    sys.exit(main(sys.argv[2:]))
