"""Names dagster-reconf writes into a Dagster instance, in one place: run tags and the run statuses it waits on.

Sensors tag the runs they request, so another tick, another sensor or a person in the UI can tell which stream and
which plan a run is for; the reconfiguration tags its run with the ledger's reconfiguration id, the way back to the
audit record.
"""

from __future__ import annotations

import dagster as dg

__all__ = ["DIRECTION_TAG", "IN_FLIGHT", "PLAN_TAG", "RECONFIGURATION_TAG", "STREAM_TAG"]

STREAM_TAG = "dagster-reconf/stream"  # the stream a run reconfigures or gathers evidence for
PLAN_TAG = "dagster-reconf/plan"  # the hash of the plan a run carries out (also the run key)
DIRECTION_TAG = "dagster-reconf/direction"  # scale_up or scale_down: what the light streams sensor saw
RECONFIGURATION_TAG = "dagster-reconf/reconfiguration"  # the audit ledger's reconfiguration id

# Runs that hold a stream: queued or running (a new plan for the stream waits until they end).
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
