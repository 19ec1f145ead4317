"""Start and stop managed streams from Dagster: a job over the streams a code location declares.

The specs live in code (the code location is where a team declares its streams, the way
``resources/streams.py`` declares ours); a run names one and what to do with it. Starting
runs the supervisor: the stream's definition is imported and its options checked before any
process starts, then its driver is started and watched until the query completes a trigger,
so a missing module, a definition that raises or returns the wrong thing, or a query that
fails in its first batch fails the run with that error, and leaves no process behind.
"""

from collections.abc import Sequence
from enum import Enum

import dagster as dg
import pandas as pd
from pydantic import Field

from dagster_reconf.core.errors import ReconfError
from dagster_reconf.core.process.endpoint_record import held_paused
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.dagster.metadata_tables import frame_table
from dagster_reconf.dagster.resources import StreamRuntimeResource

__all__ = ["StreamAction", "StreamControlConfig", "build_stream_control_job"]


class StreamAction(Enum):
    """What to do with the stream (run config names the member: ``action: start``)."""

    start = "start"  # noqa: N815 - Dagster's run config spells enums by member name
    stop = "stop"  # noqa: N815


class StreamControlConfig(dg.Config):
    """Run config of the stream control job."""

    stream: str = Field(description="The stream's name, one of the specs the job was built with.")
    action: StreamAction = Field(StreamAction.start, description="start its driver, or stop it at a batch boundary.")


def build_stream_control_job(specs: Sequence[StreamSpec], *, name: str = "stream_control_job") -> dg.JobDefinition:
    """A job that starts or stops one of ``specs`` (run config: ``ops: {control_stream: {config: {stream, action}}}``).

    Needs the ``streams`` resource (:class:`StreamRuntimeResource`).
    """
    by_name = {spec.name: spec for spec in specs}
    if len(by_name) != len(specs):
        raise ValueError(f"stream names must be unique, got {[s.name for s in specs]}")

    @dg.op(description="Start or stop a managed stream's driver.")
    def control_stream(
        context: dg.OpExecutionContext, config: StreamControlConfig, streams: StreamRuntimeResource
    ) -> dict:
        spec = by_name.get(config.stream)
        if spec is None:
            raise dg.Failure(
                description=f"stream {config.stream!r} is not declared in this code location; declared: "
                f"{', '.join(sorted(by_name)) or 'none'}"
            )
        supervisor = streams.supervisor()
        try:
            if config.action is StreamAction.start:
                result = supervisor.start(spec)
                held = held_paused(result)
                context.add_output_metadata(
                    {
                        "pid": result["pid"],
                        "control_port": result.get("control_port"),
                        "app_id": str(result.get("app_id")),
                        "entrypoint": spec.entrypoint,
                        "held_paused": held or "no",
                    }
                )
                if held:
                    context.log.warning(f"stream {spec.name} started its driver, but {held}")
            else:
                result = supervisor.stop(spec.name)
                context.add_output_metadata(
                    {"stopped": bool(result.get("stopped")), "report": dg.MetadataValue.json(result)}
                )
        except ReconfError as exc:
            raise dg.Failure(
                description=f"{config.action.value} of stream {spec.name!r} failed: {exc}",
                metadata={"stream": spec.name, "entrypoint": spec.entrypoint},
            ) from None
        context.log.info(f"stream {spec.name}: {config.action.value} done")
        return result

    declared = frame_table(
        pd.DataFrame(
            [
                {"stream": s.name, "entrypoint": s.entrypoint, "master": s.master, "storage": s.storage or ""}
                for s in specs
            ],
            columns=["stream", "entrypoint", "master", "storage"],
        )
    )

    @dg.job(
        name=name,
        description=f"Start or stop one of the streams {', '.join(sorted(by_name))}.",
        metadata={"streams": declared},
    )
    def stream_control_job() -> None:
        control_stream()

    return stream_control_job
