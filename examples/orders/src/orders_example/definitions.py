"""The project's code location: whatever ``defs/`` holds, as ``create-dagster project`` writes it.

``defs/orders/defs.yaml`` sets up the orders stream with ``dagster_reconf.ReconfStreamsComponent``: its assets and
checks, the scaling sensor, the start/stop and reconfiguration jobs, and the resources.
"""

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
