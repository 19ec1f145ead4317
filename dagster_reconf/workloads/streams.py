"""The bundled streams, written as any user writes a stream: stream definitions over the public API.

Nexmark Q1, Q2, Q3, Q5, Q8, Q11 and word count over the bundled generators (``nexmark``
and ``words`` Python data sources, paced by the wall clock), each with a per-event cost
knob, into an idempotent file sink under the stream's work directory, with the batch
oracle as their ``oracle``. Name one in a spec by its import path:

.. code-block:: python

    StreamSpec(name="orders", entrypoint="dagster_reconf.workloads.streams:q5",
               options={"rate": 3000}, source_partitions=2, state_partitions=4)

or with :func:`bundled_spec` (``bundled_spec("orders", "q5", rate=3000)``).
"""

from __future__ import annotations

from typing import Any

from dagster_reconf.core.definition import StreamContext, StreamDefinition, stream_definition
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.workloads.options import DATA_OPTIONS, GeneratedOptions, SourceOptions
from dagster_reconf.workloads.oracle import check_stream_output
from dagster_reconf.workloads.pacing import pacing_anchor
from dagster_reconf.workloads.queries import ENTRYPOINT, QUERIES, QueryDefinition, RecordCost, query_of

__all__ = ["BUNDLED", "bundled_spec", "q1", "q2", "q3", "q5", "q8", "q11", "query_of", "wordcount"]

KNOB_OPTIONS = {"source_partitions": "partitions", "max_per_trigger": "max_events_per_trigger"}


def _definition(query: QueryDefinition) -> StreamDefinition:
    def build(spark: Any, ctx: StreamContext) -> Any:
        from dagster_reconf.workloads.sources import register_sources

        options: GeneratedOptions = ctx.options
        register_sources(spark)
        anchor = pacing_anchor(
            ctx.work_dir,
            options.rate,
            rate_steps=options.rate_steps,
            max_events=options.max_events,
            update=ctx.purpose == "stream",
        )
        shared = set(SourceOptions.model_fields) & set(type(options).model_fields)  # seed, rate, vocabulary, ...
        generated = {name: getattr(options, name) for name in shared}
        source = SourceOptions(**generated, start_time=anchor.start_time, start_index=anchor.start_index)
        events = spark.readStream.format(query.source).options(**source.to_spark()).options(**ctx.source_options).load()
        return query.writer(events, RecordCost(options.cost.mode, options.cost.micros_per_record), ctx)

    build.__name__ = build.__qualname__ = query.name
    build.__module__ = __name__
    return stream_definition(
        build,
        options=GeneratedOptions,
        knob_options=KNOB_OPTIONS,
        code_versions=query.versions,
        frozen_options=DATA_OPTIONS,
        replayable=True,
        oracle=check_stream_output,
        description=query.description,
    )


BUNDLED: dict[str, StreamDefinition] = {name: _definition(query) for name, query in QUERIES.items()}
q1, q2, q3, q5, q8, q11, wordcount = (BUNDLED[n] for n in ("q1", "q2", "q3", "q5", "q8", "q11", "wordcount"))


def bundled_spec(name: str, query: str, *, source_partitions: int | None = 2, **fields: Any) -> StreamSpec:
    """A spec for bundled query ``query``; workload options (``rate``, ``cost``, ``seed``...) go in ``options``.

    Keyword arguments that are spec fields set the spec; the others are the workload's options.
    """
    if query not in QUERIES:
        raise ValueError(f"unknown bundled query {query!r}; bundled: {', '.join(QUERIES)}")
    options = {k: fields.pop(k) for k in list(fields) if k in GeneratedOptions.model_fields}
    options.update(fields.pop("options", {}))
    return StreamSpec.parse(
        {
            "name": name,
            "entrypoint": ENTRYPOINT.format(query),
            "options": options,
            "source_partitions": source_partitions,
            **fields,
        }
    )
