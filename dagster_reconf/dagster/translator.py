"""Names of everything dagster-reconf builds in a code location, derived in one place.

Like ``DagsterDbtTranslator`` and ``DagsterSlingTranslator``: asset keys, the asset group,
job, sensor, schedule and check names all come from a :class:`ReconfTranslator`, so two sets
of streams in one ``Definitions`` (two teams, two clusters) do not collide. The default
translator keeps the plain names (``trace_snapshots``, ``ds2_plans``, ...).

.. code-block:: python

    team_a = ReconfTranslator(prefix="team_a")
    traces = build_trace_assets(translator=team_a)  # team_a/trace_snapshots, team_a/stream, ...
    scaling = build_scaling_assets(translator=team_a)                   # team_a/ds2_plans,
    team_a_reconfigure_stream_job

One override point for one asset, as with ``DagsterSlingTranslator.get_asset_spec``:

.. code-block:: python

    @dataclass(frozen=True)
    class OurTranslator(ReconfTranslator):
        def get_asset_spec(self, kind: AssetKind) -> AssetSpec:
            spec = super().get_asset_spec(kind)
            return spec.replace_attributes(key=["platform", "plans"]) if kind is AssetKind.DS2_PLANS else spec
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import dagster as dg

__all__ = ["KIND_TAG", "AssetKind", "ReconfTranslator", "asset_arguments"]


class AssetKind(str, Enum):
    """Every asset dagster-reconf builds; the value is its plain key."""

    STREAM = "stream"  # the stream itself: its metrics store, observed (streams group)
    STREAM_PROGRESS = "stream_progress"  # the progress sensor's observations
    TRACE_SNAPSHOTS = "trace_snapshots"  # activities per window (traces group)
    CP_SUMMARIES = "cp_summaries"  # critical participation per window
    DS2_PLANS = "ds2_plans"  # scaling plans (scaling group)
    STREAM_CONFIGURATION = "stream_configuration"  # the applied configuration, materialized by a reconfiguration
    STREAM_STATE = "stream_state"  # the checkpoint's state by partition, read in batch (dagster-pyspark)


_GROUPS = {
    AssetKind.STREAM: "streams",
    AssetKind.STREAM_PROGRESS: "streams",
    AssetKind.TRACE_SNAPSHOTS: "traces",
    AssetKind.CP_SUMMARIES: "traces",
    AssetKind.DS2_PLANS: "scaling",
    AssetKind.STREAM_CONFIGURATION: "scaling",
    AssetKind.STREAM_STATE: "streams",
}
_KINDS = {
    AssetKind.STREAM: {"spark"},
    AssetKind.STREAM_PROGRESS: {"spark"},
    AssetKind.TRACE_SNAPSHOTS: {"spark", "pandas"},
    AssetKind.CP_SUMMARIES: {"pandas"},
    AssetKind.DS2_PLANS: {"spark"},
    AssetKind.STREAM_CONFIGURATION: {"spark"},
    AssetKind.STREAM_STATE: {"spark", "pandas"},
}
_DESCRIPTIONS = {
    AssetKind.STREAM: "A Spark Structured Streaming query, run by Spark and observed here (never materialized): the "
    "sensors record its state, lag, rates and knobs each tick, and its checks say whether its driver is alive, its "
    "query healthy and its lag within the policy's band.",
    AssetKind.STREAM_PROGRESS: "The stream's micro-batches as the progress sensor observes them.",
    AssetKind.TRACE_SNAPSHOTS: "Activities of one stream in one time window, from its Spark event logs (SnailTrail's "
    "snapshot).",
    AssetKind.CP_SUMMARIES: "Critical Participation of the window: by activity type, worker, operator and channel, "
    "beside time shares.",
    AssetKind.DS2_PLANS: "The scaling decision for a stream: a DS2 plan (knobs a -> b, with the evidence) or why not "
    "to change.",
    AssetKind.STREAM_CONFIGURATION: "The stream's execution plan in force, after carrying out the plan decided "
    "upstream (preflight, prepare, pause, migrate, verify, resume, observe, record).",
    AssetKind.STREAM_STATE: "The stream's state at its last committed batch, read in batch with Spark's state data "
    "source: rows and bytes per operator, store and partition, and the hottest partition against the median (state "
    "skew, a hot key range).",
}
KIND_TAG = "dagster-reconf/kind"  # every asset's tag naming its AssetKind (a translator's override keeps it)

_PREFIX = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


@dataclass(frozen=True)
class ReconfTranslator:
    """Turns dagster-reconf's names into this code location's.

    Attributes:
        prefix: a key prefix and name prefix (lowercase letters, digits, ``_``); empty: the plain names.
    """

    prefix: str = ""

    def __post_init__(self) -> None:
        if self.prefix and not _PREFIX.match(self.prefix):
            raise ValueError(
                f"translator prefix {self.prefix!r} must be lowercase letters, digits and _, starting with a "
                "letter (it names assets, jobs and sensors)"
            )

    def get_asset_spec(self, kind: AssetKind) -> dg.AssetSpec:
        """The whole spec of the asset ``kind``: the one place to override any of it for one asset.

        The builders build the asset from all of it (key, group, description, kinds, owners, tags, metadata, code
        version, automation condition, freshness policy; :func:`asset_arguments`), adding only what the asset
        needs of its own (partitions, dependencies, checks). Dependencies, sensors, run configs and the harness
        find the asset through :meth:`asset_key`, which reads this too.
        """
        key = dg.AssetKey([self.prefix, kind.value]) if self.prefix else dg.AssetKey(kind.value)
        return dg.AssetSpec(
            key=key,
            group_name=self.group_name(_GROUPS[kind]),
            description=_DESCRIPTIONS[kind],
            kinds=set(_KINDS[kind]),
            tags={KIND_TAG: kind.value},
        )

    def asset_key(self, kind: AssetKind | str) -> dg.AssetKey:
        """The key of the asset ``kind`` (an :class:`AssetKind`, or its value such as ``"ds2_plans"``)."""
        try:
            kind = AssetKind(kind)
        except ValueError:
            raise ValueError(
                f"no dagster-reconf asset is called {kind!r}; use one of {[k.value for k in AssetKind]}"
            ) from None
        return self.get_asset_spec(kind).key

    def name(self, name: str) -> str:
        """A job, sensor, schedule or partitions name (Dagster's names are flat: the prefix joins with ``_``)."""
        return f"{self.prefix}_{name}" if self.prefix else name

    def group_name(self, kind: str) -> str:
        """The asset group of ``streams``, ``traces`` or ``scaling`` assets."""
        return self.name(kind)

    def node_name(self, kind: AssetKind | str) -> str:
        """The node (op or graph) name Dagster gives the asset ``kind``: its key's parts joined by ``__``."""
        return "__".join(self.asset_key(kind).path)

    def stream_partitions(self, streams: Sequence[str] | None) -> dg.PartitionsDefinition:
        """The stream dimension: ``streams`` as static partitions, or None for dynamic ones.

        Dynamic partitions (``<prefix>_streams``) need no redeploy when a stream is started
        or attached: the streams sensor (:func:`build_streams_sensor`) registers every stream
        of the runtime home on its next tick.
        """
        if streams is None:
            return dg.DynamicPartitionsDefinition(name=self.name("streams"))
        names = list(streams)
        if not names:
            raise ValueError(
                "streams must name at least one stream, or be None for dynamic partitions (every stream "
                "the streams sensor finds in the runtime home)"
            )
        bad = [n for n in names if not isinstance(n, str) or not n]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"streams must be distinct non-empty names, got {names!r}")
        return dg.StaticPartitionsDefinition(names)


def asset_arguments(
    spec: dg.AssetSpec, *, graph: bool = False, group_name: str | None = None, **own: object
) -> dict[str, object]:
    """The arguments of ``@dg.asset`` (``graph``: ``@dg.graph_asset``) that build an asset from the whole ``spec``,
    with the asset's ``own`` (partitions, dependencies beside the spec's, checks); ``group_name``: a builder's
    argument that overrides the spec's group."""
    arguments: dict[str, object] = {
        "key": spec.key,
        "group_name": group_name or spec.group_name,
        "description": spec.description,
        "metadata": dict(spec.metadata) or None,
        "tags": {k: v for k, v in spec.tags.items() if not k.startswith("dagster/kind/")} or None,
        "kinds": set(spec.kinds) or None,
        "owners": list(spec.owners) or None,
        "code_version": spec.code_version,
        "automation_condition": spec.automation_condition,
    }
    deps = [*spec.deps, *own.pop("deps", [])]  # type: ignore[misc]
    freshness = getattr(spec, "freshness_policy", None)  # 1.12's AssetSpec has none
    if not graph:
        arguments["deps"] = deps or None
        if freshness is not None:
            arguments["freshness_policy"] = freshness
    elif deps or freshness is not None:
        raise ValueError(f"{spec.key.to_user_string()}: a graph asset takes no deps or freshness policy from its spec")
    return {**arguments, **own}
