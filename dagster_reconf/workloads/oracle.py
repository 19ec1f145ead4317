"""The correctness oracle of the bundled workloads: the same events, processed as a batch job.

A stream is correct when what its sink committed equals what the query computes over
the same events ``[0, n)`` in one batch job. :func:`expected_result` runs that batch
job; :func:`stream_result` turns committed sink batches into the stream's result (the
multiset of appended rows, or the last value per key for update queries); and
:func:`compare` counts lost and duplicated rows as a multiset difference, so a row
emitted twice is caught even when every expected row is present.
:func:`check_stream_output` does all of it for a managed bundled stream (the bundled
definitions' ``oracle``, see :mod:`dagster_reconf.workloads.streams`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from dagster_reconf.core.definition import OutputComparison
from dagster_reconf.core.store.checkpoint import checkpoint_facts
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.workloads.options import PACING_OPTIONS, GeneratedOptions, SourceOptions
from dagster_reconf.workloads.queries import QueryDefinition, query_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from dagster_reconf.core.spec import StreamSpec

__all__ = [
    "OutputComparison",
    "check_stream_output",
    "compare",
    "compare_with_batch",
    "consumed_events",
    "expected_result",
    "last_watermark",
    "stream_result",
]


def _final_rows(frame: pd.DataFrame, query: QueryDefinition, watermark: str | None) -> pd.DataFrame:
    """Rows an append aggregation has emitted by ``watermark`` (all rows for other queries)."""
    column = query.final_after_watermark
    if column is None:
        return frame
    if watermark is None:
        return frame.iloc[0:0]
    cutoff = pd.Timestamp(watermark).tz_convert("UTC").tz_localize(None)
    values = pd.to_datetime(frame[column])
    if getattr(values.dt, "tz", None) is not None:
        values = values.dt.tz_convert("UTC").dt.tz_localize(None)
    return frame[values <= cutoff]


def expected_result(
    spark: SparkSession, query: QueryDefinition, options: SourceOptions, *, watermark: str | None = None
) -> pd.DataFrame:
    """Run ``query`` as a batch job over events ``[0, options.max_events)``."""
    from dagster_reconf.workloads.sources import register_sources

    if options.max_events is None:
        raise ValueError("the oracle needs a bounded input: set max_events on the source options")
    register_sources(spark)
    events = spark.read.format(query.source).options(**options.to_spark(exclude=PACING_OPTIONS)).load()
    frame = query.build(events).toPandas()
    return _final_rows(frame, query, watermark)


def stream_result(committed: pd.DataFrame, query: QueryDefinition, *, watermark: str | None = None) -> pd.DataFrame:
    """The stream's result from committed sink batches (see :func:`~dagster_reconf.workloads.sink.read_sink`)."""
    order = [c for c in ("batch_id",) if c in committed.columns]
    if query.output_mode == "update" and not committed.empty:
        committed = committed.sort_values(order, kind="stable").drop_duplicates(list(query.key_columns), keep="last")
    return _final_rows(committed.drop(columns=order), query, watermark)


def _normalized(frame: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(index=range(len(frame)))
    for column in sorted(frame.columns):
        values = frame[column].reset_index(drop=True)
        if pd.api.types.is_datetime64_any_dtype(values):
            if getattr(values.dt, "tz", None) is not None:
                values = values.dt.tz_convert("UTC").dt.tz_localize(None)
            values = values.astype("datetime64[us]").astype("int64")
        out[column] = values.astype(object).where(values.notna(), None)
    return out


def compare(actual: pd.DataFrame, expected: pd.DataFrame) -> OutputComparison:
    """Multiset difference of two results with the same columns."""
    if set(actual.columns) != set(expected.columns) and len(actual):
        raise ValueError(f"result columns differ: stream {sorted(actual.columns)} vs oracle {sorted(expected.columns)}")
    if not len(actual) or not len(expected):
        return OutputComparison(len(expected), len(actual), len(expected), len(actual))
    counts_actual = _normalized(actual).value_counts(dropna=False)
    counts_expected = _normalized(expected).value_counts(dropna=False)
    both = pd.concat([counts_actual.rename("actual"), counts_expected.rename("expected")], axis=1).fillna(0)
    diff = both["actual"] - both["expected"]
    return OutputComparison(
        expected_rows=len(expected),
        actual_rows=len(actual),
        lost=int((-diff).clip(lower=0).sum()),
        duplicated=int(diff.clip(lower=0).sum()),
    )


def consumed_events(checkpoint: Any) -> int:
    """Events a bundled stream read through its checkpoint's last committed batch (its offsets are event indexes)."""
    facts = checkpoint_facts(checkpoint, with_offsets=True)
    if facts.last_committed_batch is None:
        return 0
    offsets = facts.end_offsets.get(facts.last_committed_batch) or []
    return max((int(o["index"]) for o in offsets if isinstance(o, dict) and "index" in o), default=0)


def last_watermark(paths: StreamPaths) -> str | None:
    """The watermark of the last committed batch, from the metrics store."""
    from dagster_reconf.core.store.metrics import MetricsStore

    record = MetricsStore(paths.metrics).last_progress()
    return ((record or {}).get("progress") or {}).get("eventTime", {}).get("watermark")


def check_stream_output(
    spark: SparkSession, home: Path | str, spec: StreamSpec, watermark: str | None = None
) -> OutputComparison:
    """Compare a stopped bundled stream's committed output with the oracle over exactly the events it read.

    Args:
        watermark: the watermark the output is final by (default: the last recorded batch's).
    """
    from dagster_reconf.workloads.sink import read_sink

    paths = StreamPaths(Path(home).resolve(), spec.name)
    query = query_of(spec)
    options = GeneratedOptions.model_validate(spec.options)
    watermark = watermark if watermark is not None else last_watermark(paths)
    source = SourceOptions(
        seed=options.seed,
        max_events=max(1, consumed_events(paths.checkpoint)),
        event_time_rate=options.event_time_rate,
        vocabulary=options.vocabulary,
        words_per_sentence=options.words_per_sentence,
    )
    actual = stream_result(read_sink(paths.work / "output"), query, watermark=watermark)
    if consumed_events(paths.checkpoint) == 0:
        return compare(actual, actual.iloc[0:0])
    return compare(actual, expected_result(spark, query, source, watermark=watermark))


def compare_with_batch(
    query: QueryDefinition, events: DataFrame, output: Path | str, watermark: str | None
) -> OutputComparison:
    """A stream's committed sink output (``output``) against ``query`` run as a batch job over ``events``, the very
    events the stream read."""
    from dagster_reconf.workloads.sink import read_sink

    actual = stream_result(read_sink(output), query, watermark=watermark)
    return compare(actual, _final_rows(query.build(events).toPandas(), query, watermark))
