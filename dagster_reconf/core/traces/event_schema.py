"""The columns of the activity table and the shapes of the Spark events the trace normalizer reads.

Arrow parses event log lines straight into :data:`EVENT_SCHEMA` (every used event type's fields) or
:data:`TASK_END_SCHEMA` (``SparkListenerTaskEnd`` alone, the bulk of a streaming log); :data:`USED_EVENTS` are the
types the normalizer takes, and everything else is counted as skipped.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "ACTIVITY_COLUMNS",
    "ACTIVITY_TYPES",
    "DRIVER",
    "EVENT_SCHEMA",
    "STEP_ACTIVITIES",
    "TASK_END_SCHEMA",
    "USED_EVENTS",
]

ACTIVITY_TYPES = (
    "scheduling",
    "deserialization",
    "buffer",
    "processing",
    "serialization",
    "data",
    "control",
    "waiting",
    "unknown",
)
ACTIVITY_COLUMNS = [
    "app_id",
    "query_id",
    "batch_id",
    "job_id",
    "stage_id",
    "stage_attempt",
    "operator",
    "task_id",
    "attempt",
    "status",
    "speculative",
    "worker",
    "src_worker",
    "dst_worker",
    "activity",
    "start_ms",
    "end_ms",
    "records_in",
    "records_out",
    "bytes_in",
    "bytes_out",
    "cpu_ms",
]
DRIVER = "driver"
STEP_ACTIVITIES = ("scheduling", "deserialization", "buffer", "processing", "serialization", "data")
_I64 = pa.int64()
TASK_END_SCHEMA = pa.schema(
    [
        ("Event", pa.string()),
        ("Stage ID", _I64),
        ("Stage Attempt ID", _I64),
        ("Task End Reason", pa.struct([("Reason", pa.string())])),
        (
            "Task Info",
            pa.struct(
                [(n, _I64) for n in ("Task ID", "Attempt", "Launch Time", "Finish Time", "Getting Result Time")]
                + [("Executor ID", pa.string()), ("Speculative", pa.bool_()), ("Killed", pa.bool_())]
            ),
        ),
        (
            "Task Metrics",
            pa.struct(
                [
                    ("Executor Deserialize Time", _I64),
                    ("Executor Run Time", _I64),
                    ("Result Serialization Time", _I64),
                    ("Executor CPU Time", _I64),
                    ("Executor Deserialize CPU Time", _I64),
                    (
                        "Shuffle Read Metrics",
                        pa.struct(
                            [
                                (n, _I64)
                                for n in (
                                    "Fetch Wait Time",
                                    "Total Records Read",
                                    "Remote Bytes Read",
                                    "Local Bytes Read",
                                )
                            ]
                        ),
                    ),
                    (
                        "Shuffle Write Metrics",
                        pa.struct(
                            [
                                (n, _I64)
                                for n in ("Shuffle Bytes Written", "Shuffle Write Time", "Shuffle Records Written")
                            ]
                        ),
                    ),
                    ("Input Metrics", pa.struct([("Bytes Read", _I64), ("Records Read", _I64)])),
                    ("Output Metrics", pa.struct([("Bytes Written", _I64), ("Records Written", _I64)])),
                ]
            ),
        ),
    ]
)
_STAGE_INFO = pa.struct(
    [
        ("Stage ID", _I64),
        ("Parent IDs", pa.list_(_I64)),
        ("RDD Info", pa.list_(pa.struct([("Scope", pa.string())]))),
    ]
)
EVENT_SCHEMA = pa.schema(
    list(TASK_END_SCHEMA)
    + [
        ("App ID", pa.string()),
        ("Executor ID", pa.string()),
        ("Executor Info", pa.struct([("Total Cores", _I64)])),
        ("Job ID", _I64),
        ("Stage Infos", pa.list_(_STAGE_INFO)),
        ("Stage Info", _STAGE_INFO),
        (
            "Properties",
            pa.struct([(k, pa.string()) for k in ("sql.streaming.queryId", "streaming.sql.batchId", "spark.job.id")]),
        ),
    ]
)
"""Every field the normalizer reads, of every used event type: one schema for Arrow to parse a whole log with."""
USED_EVENTS = frozenset(
    {
        "SparkListenerApplicationStart",
        "SparkListenerExecutorAdded",
        "SparkListenerJobStart",
        "SparkListenerStageSubmitted",
        "SparkListenerTaskEnd",
    }
)
