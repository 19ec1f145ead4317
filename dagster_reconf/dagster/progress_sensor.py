"""Sensors over the metrics store of a managed stream.

:func:`build_stream_progress_sensor` reads what a stream's driver appended since the
last tick (a byte cursor into the append-only metrics store) and reports it as an
asset observation, so the Dagster UI shows rates and backlog over time without any
run. It never requests runs: scaling decisions are a separate policy's job.

Contract: one read per tick (bounded work), a JSON cursor ``{"version": 1, "offset": n}``
(an undecodable cursor logs a warning and restarts from the beginning), and a skip
reason on every tick.
"""

import json
from dataclasses import dataclass

import dagster as dg
import pandas as pd

from dagster_reconf.dagster.cursors import parse_cursor
from dagster_reconf.dagster.resources import StreamRuntimeResource

__all__ = ["ProgressCursor", "build_stream_progress_sensor"]

DEFAULT_MINIMUM_INTERVAL_SECONDS = 30
CURSOR_VERSION = 1


@dataclass(frozen=True)
class ProgressCursor:
    """Where the sensor stopped reading a stream's metrics store."""

    offset: int = 0
    version: int = CURSOR_VERSION

    def serialize(self) -> str:
        return json.dumps({"version": self.version, "offset": self.offset})

    @classmethod
    def parse(cls, raw: str | None, context: dg.SensorEvaluationContext | None = None) -> "ProgressCursor":
        def build(data: dict) -> ProgressCursor:
            if int(data["offset"]) < 0:
                raise ValueError(f"negative offset in {data!r}")
            return cls(offset=int(data["offset"]))

        return parse_cursor(raw, CURSOR_VERSION, build, cls, context, "reading from the beginning")


def build_stream_progress_sensor(
    *,
    stream: str,
    asset_key: dg.AssetKey | str = "stream_progress",
    partitioned: bool = True,
    name: str | None = None,
    minimum_interval_seconds: int = DEFAULT_MINIMUM_INTERVAL_SECONDS,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor that observes ``stream``'s new micro-batches on ``asset_key``.

    Args:
        stream: managed stream name.
        asset_key: the asset the observations are recorded on.
        partitioned: record them on the partition named like the stream.
        name: sensor name (default ``<stream>_progress_sensor`` with ``-`` as ``_``).
        minimum_interval_seconds: seconds between ticks.
        default_status: STOPPED by default; start it in the UI or with ``dagster sensor start``.

    Returns:
        SensorDefinition: needs a ``streams`` resource (:class:`StreamRuntimeResource`).
    """
    key = dg.AssetKey.from_coercible(asset_key)
    sensor_name = name or f"{stream.replace('-', '_')}_progress_sensor"

    @dg.sensor(
        name=sensor_name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=f"Observes the micro-batches of stream {stream!r} from its metrics store.",
    )
    def _sensor(context: dg.SensorEvaluationContext, streams: StreamRuntimeResource) -> dg.SensorResult:
        cursor = ProgressCursor.parse(context.cursor, context)
        frame, offset = streams.progress(stream, cursor.offset)
        next_cursor = ProgressCursor(offset=offset).serialize()
        if frame.empty:
            return dg.SensorResult(
                skip_reason=dg.SkipReason(
                    f"stream {stream!r}: no new progress since byte {cursor.offset} of its metrics store"
                ),
                cursor=next_cursor,
            )
        last = frame.iloc[-1]
        observation = dg.AssetObservation(
            asset_key=key,
            partition=stream if partitioned else None,
            metadata={
                "batches": len(frame),
                "last_batch_id": int(last["batch_id"]),
                "input_rows_per_second": float(frame["input_rows_per_second"].mean()),
                "processed_rows_per_second": float(frame["processed_rows_per_second"].mean()),
                "backlog_events": int(last["backlog_events"]) if pd.notna(last["backlog_events"]) else -1,
                "batch_duration_ms": int(last["batch_duration_ms"]),
                "state_rows": int(last["state_rows"]),
            },
        )
        return dg.SensorResult(
            asset_events=[observation],
            cursor=next_cursor,
            skip_reason=dg.SkipReason(
                f"stream {stream!r}: observed batches {int(frame['batch_id'].iloc[0])}-{int(last['batch_id'])}; "
                "this sensor only observes"
            ),
        )

    return _sensor
