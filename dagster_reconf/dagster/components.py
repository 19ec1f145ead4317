"""dagster-reconf as a Dagster Component: streams set up in a ``defs.yaml``, as dagster-dbt and dagster-sling are.

.. code-block:: yaml

    # defs.yaml (``dg scaffold defs dagster_reconf.ReconfStreamsComponent streams`` writes one to start from)
    type: dagster_reconf.ReconfStreamsComponent
    attributes:
      home: "{{ env.RECONF_HOME }}"
      traces: {window_minutes: 15}
      policy: {name: ds2, config: {max_cores: 16}}
      translation:
        ds2_plans: {group_name: platform, owners: ["team:data"]}

The YAML is a thin face over the Python builders (:func:`~dagster_reconf.build_trace_assets`,
:func:`~dagster_reconf.build_scaling_assets`, the sensors, the stream control job): ``build_defs`` calls them, so the
YAML and the Python give the same ``Definitions``. This module is what the ``dagster_dg_cli.registry_modules`` entry
point names: it imports Dagster and pydantic only, the builders load when a component builds its definitions.
"""

from dataclasses import dataclass, field
from typing import Any, Literal

import dagster as dg
from pydantic import Field

__all__ = [
    "AssetAttributes",
    "PolicySettings",
    "ReconfStreamsComponent",
    "ReconfStreamsScaffolder",
    "SensorSettings",
    "TracesSettings",
]

ASSET_KINDS = (
    "stream",
    "stream_progress",
    "trace_snapshots",
    "cp_summaries",
    "ds2_plans",
    "stream_configuration",
    "stream_state",
)


class TracesSettings(dg.Resolvable, dg.Model):
    """The trace assets' time windows: a partition per window in which a stream ran, registered by the sensor."""

    window_minutes: int = Field(
        60,
        description="Window length in minutes: 1, 2, 3, 5, ..., 60 (it divides the hour). A stream that runs all year "
        "adds 525,600 / window_minutes windows: keep that far under Dagster's 100,000 partitions per asset.",
    )


class PolicySettings(dg.Resolvable, dg.Model):
    """The scaling policy and its settings."""

    name: Literal["ds2", "dhalion", "dynamic_allocation"] = Field(
        "ds2", description="DS2's one-step plans, or a baseline that steps by fixed amounts."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="PolicyConfig settings, e.g. {max_cores: 16, utilization_target: 0.6}; unknown ones are refused.",
    )


class SensorSettings(dg.Resolvable, dg.Model):
    """The sensor that watches the streams and requests plan runs."""

    kind: Literal["streams", "scaling", "none"] = Field(
        "streams",
        description="streams: one light sensor over every stream of the home (it also keeps each stream's page "
        "current); scaling: one per stream named in streams, planning in the tick; none: no sensor.",
    )
    minimum_interval_seconds: int = Field(30, ge=1, description="Seconds between the sensor's ticks, at least.")
    default_status: Literal["running", "stopped"] = Field(
        "stopped", description="Whether the sensor runs from the start; a sensor that reconfigures starts stopped."
    )


class AssetAttributes(dg.Resolvable, dg.Model):
    """What the ``translation`` of one asset kind sets on its spec (the rest stays the default's)."""

    key: list[str] | None = Field(None, description="The asset key, as its parts.")
    group_name: str | None = Field(None, description="The asset group.")
    description: str | None = Field(None, description="The description the asset page shows.")
    owners: list[str] | None = Field(None, description="Owners, as user emails or team:name.")
    tags: dict[str, str] | None = Field(None, description="Tags, beside the default dagster-reconf/kind tag.")
    kinds: list[str] | None = Field(None, description="Kinds, beside the default ones (spark, pandas).")
    metadata: dict[str, Any] | None = Field(None, description="Definition metadata (a runbook's URL, ...).")
    code_version: str | None = Field(None, description="The asset's code version.")


class ReconfStreamsScaffolder(dg.Scaffolder):
    """Writes a ``defs.yaml`` that loads as written: this home's streams, hourly trace windows, DS2, the streams
    sensor stopped, each setting with a comment saying what it does."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        request.target_path.mkdir(parents=True, exist_ok=True)
        (request.target_path / "defs.yaml").write_text(SCAFFOLD.format(type=request.type_name))


@dg.scaffold_with(ReconfStreamsScaffolder)
@dataclass
class ReconfStreamsComponent(dg.Component, dg.Resolvable):
    """Streams a runtime home holds, their trace, CP and scaling assets, a sensor over them, the reconfiguration job
    and the resources, from a ``defs.yaml``.

    To get started: ``dg scaffold defs dagster_reconf.ReconfStreamsComponent streams``.
    """

    home: str = ".reconf"
    ledger_url: str = ""
    streams: list[str] | None = None
    traces: TracesSettings = field(default_factory=TracesSettings)
    stream_specs: list[dict[str, Any]] = field(default_factory=list)
    stream_spec_files: list[str] = field(default_factory=list)
    policy: PolicySettings = field(default_factory=PolicySettings)
    strategy: Literal["native", "replay", "precopy"] = "native"
    sensor: SensorSettings = field(default_factory=SensorSettings)
    remote: bool = False
    prefix: str = ""
    translation: dict[str, AssetAttributes] = field(default_factory=dict)
    state_reader: dict[str, str] = field(default_factory=dict)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return build_reconf_defs(self)


def build_reconf_defs(component: ReconfStreamsComponent) -> dg.Definitions:
    """The ``Definitions`` of ``component``, through the same builders a Python code location calls.

    Raises:
        ValueError: an attribute that cannot be built, named with its value and the fix.
    """
    from dagster_pyspark import PySparkResource

    from dagster_reconf import (
        AuditLedgerResource,
        StreamRuntimeResource,
        StreamSpec,
        build_reconfiguration_failure_sensor,
        build_scaling_assets,
        build_scaling_sensor,
        build_stream_control_job,
        build_stream_state_asset,
        build_streams_sensor,
        build_trace_assets,
    )
    from dagster_reconf.core.errors import SpecError
    from dagster_reconf.core.spec import read_spec_file
    from dagster_reconf.dagster.state_assets import STATE_READER_CONF

    if not component.home:
        raise ValueError(
            f"home is {component.home!r}: give the runtime home's path or URL, e.g. home: \"{{{{ env('RECONF_HOME', "
            f"'.reconf') }}}}\" ({{{{ env.RECONF_HOME }}}} is empty where the variable is not set)"
        )
    unknown = sorted(set(component.translation) - set(ASSET_KINDS))
    if unknown:
        raise ValueError(f"translation names no asset kind {unknown}; the kinds are {list(ASSET_KINDS)}")
    # A spec file's stream replaces an inline spec of the same name: a deployment gives the whole spec (its cluster,
    # storage and driver host) where the YAML keeps a local default; an empty path (an unset variable) is no file.
    by_name = {spec.name: spec for spec in map(StreamSpec.parse, component.stream_specs)}
    for i, path in enumerate(component.stream_spec_files):
        if path:
            try:
                spec = StreamSpec.parse(read_spec_file(path))
            except SpecError as exc:
                raise ValueError(f"stream_spec_files[{i}]: {exc}") from None
            by_name[spec.name] = spec
    specs = list(by_name.values())
    translator = _translator(component.prefix, component.translation)
    traces = build_trace_assets(
        streams=component.streams,
        window_minutes=component.traces.window_minutes,
        translator=translator,
        policy_config=component.policy.config,
    )
    scaling = build_scaling_assets(
        streams=component.streams,
        policy=component.policy.name,
        policy_config=component.policy.config,
        strategy=component.strategy,
        translator=translator,
    )
    status = dg.DefaultSensorStatus(component.sensor.default_status.upper())
    sensors = [build_reconfiguration_failure_sensor(job=scaling.job, name=translator.name("reconfiguration_failures"))]
    if component.sensor.kind == "streams":
        sensors.append(
            build_streams_sensor(
                scaling=scaling,
                traces=traces,
                minimum_interval_seconds=component.sensor.minimum_interval_seconds,
                default_status=status,
            )
        )
    elif component.sensor.kind == "scaling":
        if not component.streams:
            raise ValueError(
                "sensor.kind 'scaling' is one sensor per stream: name them in streams, or use sensor.kind 'streams' "
                "(one sensor over every stream of the home)"
            )
        sensors += [
            build_scaling_sensor(
                stream=name,
                scaling=scaling,
                traces=traces,
                minimum_interval_seconds=component.sensor.minimum_interval_seconds,
                default_status=status,
            )
            for name in component.streams
        ]
    jobs = [build_stream_control_job(specs, name=translator.name("stream_control_job"))] if specs else []
    resources = {
        "streams": StreamRuntimeResource(home=component.home, remote=component.remote),
        "audit_ledger": AuditLedgerResource(url=component.ledger_url, home=component.home),
        "pyspark": PySparkResource(spark_config={**STATE_READER_CONF, **component.state_reader}),
    }
    state = build_stream_state_asset(streams=component.streams, translator=translator)
    return dg.Definitions.merge(
        traces.defs,
        scaling.defs,
        dg.Definitions(assets=[state], jobs=jobs, sensors=sensors, resources=resources),
    )


def _translator(prefix: str, translation: dict[str, AssetAttributes]) -> Any:
    """A :class:`~dagster_reconf.ReconfTranslator` whose specs take the YAML's ``translation`` per asset kind."""
    from dagster_reconf.dagster.translator import AssetKind, ReconfTranslator

    @dataclass(frozen=True)
    class YamlTranslator(ReconfTranslator):
        def get_asset_spec(self, kind: AssetKind) -> dg.AssetSpec:
            spec = super().get_asset_spec(kind)
            attributes = translation.get(kind.value)
            if attributes is None:
                return spec
            given = attributes.model_dump(exclude_none=True)
            kinds, tags = given.pop("kinds", []), given.pop("tags", {})
            spec = spec.replace_attributes(**given) if given else spec
            return spec.merge_attributes(kinds=set(kinds), tags=tags) if kinds or tags else spec

    return YamlTranslator(prefix=prefix)


SCAFFOLD = """\
type: {type}

attributes:
  # Where the streams live: their specs, checkpoints, metrics and event logs (`reconf stream start --home ...`);
  # RECONF_HOME when set, else ./.reconf (the CLI's default).
  home: "{{{{ env('RECONF_HOME', '.reconf') }}}}"
  # The audit ledger's SQLAlchemy URL; empty: SQLite in the home (postgresql://... in production).
  ledger_url: ""
  # Streams by name, as static partitions; leave it out for dynamic ones (every stream the home holds).
  # streams: [orders]
  # Time windows of the trace snapshots and CP summaries (UTC; 1, 2, 3, 5, ..., 60 minutes): a partition for each
  # window in which a stream ran, which the sensor registers.
  traces:
    window_minutes: 60
  # The scaling policy (ds2, dhalion, dynamic_allocation) and its PolicyConfig settings.
  policy:
    name: ds2
    config:
      max_cores: 8
  # How state moves in a reconfiguration: native, replay or precopy.
  strategy: native
  # The streams sensor watches every stream, keeps its page current and requests plan runs; it starts stopped.
  sensor:
    kind: streams
    minimum_interval_seconds: 30
    default_status: stopped
  # Drivers on other hosts, reached through the storage the streams keep their records in.
  remote: false
  # Spark settings of the batch session stream_state reads each stream's state with (an s3a endpoint, ...).
  # state_reader:
  #   spark.hadoop.fs.s3a.endpoint: http://127.0.0.1:9000
  # Per asset kind (stream, trace_snapshots, cp_summaries, ds2_plans, stream_configuration, stream_state): key,
  # group_name, description, owners, tags, kinds, metadata, code_version.
  # translation:
  #   ds2_plans:
  #     group_name: platform
  #     owners: ["team:data"]
"""
