"""One small stream per stateful operator Spark 4 ships, over the same input: a user's code, not ours.

Input: JSON files of events ``{id, k, ts}`` in ``left_dir`` (and ``{rid, rv, rts}`` in ``right_dir`` for the joins),
written by the test. Every query writes each micro-batch to ``output_dir/batch=<id>`` (idempotent by batch id), and
:data:`OPERATORS` says for each how its output compares with a batch job over the same input (:func:`expected`):
``rows`` (the output's rows, as a multiset) or ``latest`` (per key, the row of the newest batch that wrote it).

Event time runs 100 s per input file with a watermark delay of 1000 s, so nothing is late; an event at a far
``ts`` (id -1, key -1, :data:`SENTINEL_TS`) closes every window, session, timer and outer-join row at the end.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel
from pyspark import cloudpickle
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from dagster_reconf import stream_definition

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Python workers get the processors by value

LEFT_SCHEMA = "id long, k long, ts timestamp"
RIGHT_SCHEMA = "rid long, rv long, rts timestamp"
DELAY = "1000 seconds"
SENTINEL_TS = 10_000_000  # seconds since the epoch: far past every input event


class OperatorOptions(BaseModel):
    operator: str
    left_dir: str
    right_dir: str | None = None
    output_dir: str


# -- transformWithStateInPandas processors ---------------------------------------------------------------------------


def _processors() -> dict[str, Any]:
    """The ``StatefulProcessor`` classes, built on first use (their module needs a PySpark with pandas support)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
    from pyspark.sql.types import LongType, StructField, StructType

    count_schema = StructType([StructField("n", LongType())])
    id_schema = StructType([StructField("id", LongType())])

    class Collections(StatefulProcessor):
        """Per key: a count (value state), the ids (list state), each id once (map state)."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.count = handle.getValueState("count", count_schema)
            self.ids = handle.getListState("ids", id_schema)
            self.seen = handle.getMapState("seen", id_schema, count_schema)

        def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:  # noqa: N802 - PySpark's name
            n = self.count.get()[0] if self.count.exists() else 0
            for frame in rows:
                n += len(frame)
                for i in frame["id"].tolist():
                    self.ids.appendValue((int(i),))
                    self.seen.updateValue((int(i),), (1,))
            self.count.update((n,))
            yield pd.DataFrame({"k": [int(key[0])], "n": [n]})

        def close(self) -> None:
            pass

    class Timers(StatefulProcessor):
        """Per key: a count, emitted once, when an event-time timer past the key's last event fires."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.handle = handle
            self.count = handle.getValueState("count", count_schema)

        def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:  # noqa: N802
            n = self.count.get()[0] if self.count.exists() else 0
            latest = 0
            for frame in rows:
                n += len(frame)
                latest = max(latest, int(frame["ts"].max().timestamp() * 1000))
            self.count.update((n,))
            for timer in self.handle.listTimers():
                self.handle.deleteTimer(timer)
            self.handle.registerTimer(latest + 1000)
            return iter([])

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:  # noqa: N802
            yield pd.DataFrame({"k": [int(key[0])], "n": [self.count.get()[0]]})
            self.count.clear()

        def close(self) -> None:
            pass

    class Expiring(StatefulProcessor):
        """Per key: a count in a value state with a TTL (an hour: nothing expires in a test)."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.count = handle.getValueState("count", count_schema, ttlDurationMs=3_600_000)

        def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:  # noqa: N802
            n = (self.count.get()[0] if self.count.exists() else 0) + sum(len(frame) for frame in rows)
            self.count.update((n,))
            yield pd.DataFrame({"k": [int(key[0])], "n": [n]})

        def close(self) -> None:
            pass

    class RowCount(StatefulProcessor):
        """``transformWithState`` on rows (not pandas frames): per key, a count."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.count = handle.getValueState("count", count_schema)

        def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:  # noqa: N802
            n = (self.count.get()[0] if self.count.exists() else 0) + sum(1 for _ in rows)
            self.count.update((n,))
            yield Row(k=int(key[0]), n=n)

        def close(self) -> None:
            pass

    return {"collections": Collections, "timers": Timers, "ttl": Expiring, "rows": RowCount}


def _count_until_timeout(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """``applyInPandasWithState``: count a key's events; emit the count once its event-time timeout fires."""
    if state.hasTimedOut:
        (n,) = state.get
        state.remove()
        yield pd.DataFrame({"k": [int(key[0])], "n": [int(n)]})
        return
    n = state.get[0] if state.exists else 0
    latest = 0
    for frame in frames:
        n += len(frame)
        latest = max(latest, int(frame["ts"].max().timestamp() * 1000))
    state.update((n,))
    state.setTimeoutTimestamp(latest + 1000)


# -- the operators -----------------------------------------------------------------------------------------------


def _tws(name: str, time_mode: str) -> Callable[[DataFrame, DataFrame | None], DataFrame]:
    def build(left: DataFrame, right: DataFrame | None) -> DataFrame:
        source = left.withWatermark("ts", DELAY) if time_mode == "EventTime" else left
        mode = "Append" if name == "timers" else "Update"
        grouped = source.groupBy("k")
        apply = grouped.transformWithState if name == "rows" else grouped.transformWithStateInPandas
        return apply(_processors()[name](), outputStructType="k long, n long", outputMode=mode, timeMode=time_mode)

    return build


def _join(how: str) -> Callable[[DataFrame, DataFrame | None], DataFrame]:
    def build(left: DataFrame, right: DataFrame | None) -> DataFrame:
        assert right is not None
        condition = (F.col("id") == F.col("rid")) & F.col("rts").between(
            F.col("ts") - F.expr("INTERVAL 5 SECONDS"), F.col("ts") + F.expr("INTERVAL 5 SECONDS")
        )
        joined = left.withWatermark("ts", DELAY).join(right.withWatermark("rts", DELAY), condition, how)
        return joined.select("id", "k", "rv")

    return build


def _session(left: DataFrame, right: DataFrame | None) -> DataFrame:
    sessions = left.withWatermark("ts", DELAY).groupBy(F.session_window("ts", "8 seconds"), "k").count()
    return sessions.select(F.col("session_window.start").alias("start"), "k", F.col("count").alias("n"))


def _chained(left: DataFrame, right: DataFrame | None) -> DataFrame:
    windows = left.withWatermark("ts", DELAY).groupBy(F.window("ts", "100 seconds"), "k").count()
    per_k = windows.groupBy(F.window(F.window_time("window"), "1000 seconds"), "k").agg(F.sum("count").alias("n"))
    return per_k.select(F.col("window.start").alias("start"), "k", "n")


def _aggregation(left: DataFrame, right: DataFrame | None) -> DataFrame:
    return left.groupBy("k").agg(F.count("*").alias("n"), F.sum("id").alias("s"))


def _dedup(left: DataFrame, right: DataFrame | None) -> DataFrame:
    return left.dropDuplicates(["id"]).select("id", "k")


def _dedup_within_watermark(left: DataFrame, right: DataFrame | None) -> DataFrame:
    return left.withWatermark("ts", DELAY).dropDuplicatesWithinWatermark(["id"]).select("id", "k")


def _with_timeout(left: DataFrame, right: DataFrame | None) -> DataFrame:
    return (
        left.withWatermark("ts", DELAY)
        .groupBy("k")
        .applyInPandasWithState(
            _count_until_timeout, "k long, n long", "n long", "Append", GroupStateTimeout.EventTimeTimeout
        )
    )


@dataclass(frozen=True)
class Operator:
    """One stateful query: how it is built, its output mode, how its output compares, whether it reads the right
    side, the key of a ``latest`` comparison, and whether it runs a batch every trigger."""

    build: Callable[[DataFrame, DataFrame | None], DataFrame]
    mode: Literal["append", "update"]
    compare: Literal["rows", "latest"]
    joins: bool = False
    key: tuple[str, ...] = ("k",)
    every_trigger: bool = False  # processing-time transformWithState: a batch every trigger, data or not


OPERATORS: dict[str, Operator] = {
    "aggregation": Operator(_aggregation, "update", "latest"),
    "dropDuplicates": Operator(_dedup, "append", "rows"),
    "dropDuplicatesWithinWatermark": Operator(_dedup_within_watermark, "append", "rows"),
    "session_window": Operator(_session, "append", "rows"),
    "inner_join": Operator(_join("inner"), "append", "rows", joins=True),
    "left_outer_join": Operator(_join("left_outer"), "append", "rows", joins=True),
    "applyInPandasWithState": Operator(_with_timeout, "append", "rows"),
    "transformWithState": Operator(_tws("collections", "None"), "update", "latest"),
    "transformWithState_timers": Operator(_tws("timers", "EventTime"), "append", "rows"),
    "transformWithState_ttl": Operator(_tws("ttl", "ProcessingTime"), "update", "latest", every_trigger=True),
    "transformWithState_rows": Operator(_tws("rows", "None"), "update", "latest"),
    "chained_aggregations": Operator(_chained, "append", "rows"),
}


def _batch_expected(name: str, left: DataFrame, right: DataFrame | None) -> DataFrame:
    """What the operator's output must hold, computed as a batch job (no watermark, no state)."""
    if name == "aggregation":
        return _aggregation(left, right)
    if name in ("dropDuplicates", "dropDuplicatesWithinWatermark"):
        return _dedup(left, right)
    if name in ("inner_join", "left_outer_join"):
        return _join("inner" if name == "inner_join" else "left_outer")(left, right)
    if name == "session_window":
        sessions = left.groupBy(F.session_window("ts", "8 seconds"), "k").count()
        return sessions.select(F.col("session_window.start").alias("start"), "k", F.col("count").alias("n"))
    if name == "chained_aggregations":
        return _chained(left, right)
    return left.groupBy("k").agg(F.count("*").alias("n"))  # the per-key counts of the Python operators


def expected(spark: SparkSession, options: OperatorOptions) -> DataFrame:
    """:func:`_batch_expected` over every input file, without the sentinel."""
    left = spark.read.schema(LEFT_SCHEMA).json(options.left_dir).where("id >= 0")
    right = spark.read.schema(RIGHT_SCHEMA).json(options.right_dir).where("rid >= 0") if options.right_dir else None
    return _batch_expected(options.operator, left, right)


@stream_definition(options=OperatorOptions)
def stateful(spark, ctx):
    """The stateful operator asked for, over the input files, each batch written by its id."""
    options: OperatorOptions = ctx.options
    operator = OPERATORS[options.operator]
    left = spark.readStream.schema(LEFT_SCHEMA).json(options.left_dir)
    right = spark.readStream.schema(RIGHT_SCHEMA).json(options.right_dir) if operator.joins else None
    output = options.output_dir

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(f"{output}/batch={batch_id}")

    return operator.build(left, right).writeStream.outputMode(operator.mode).foreachBatch(write)
