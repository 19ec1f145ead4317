"""What a checkpoint's state holds, read with Spark's state data sources.

For every stateful operator and each of its state stores: the number of rows and an
order-independent checksum of every column (the sum of ``xxhash64`` of the row as
an exact 38-digit decimal; a sum, unlike an XOR, also catches a duplicated row), and
which partitions hold rows. A migration is verified by comparing these before and
after it (:mod:`dagster_reconf.core.reconfig.verification`).

A ``transformWithState`` operator keeps its state in named state variables (value, list and map state, its TTL
expiry, its timers), listed in the operator metadata Spark writes (v2): each is read on its own (``stateVarName``;
``readRegisteredTimers`` for timers) and summarized as a store ``<store>/<variable>``, so a verification covers
every variable.

Also used before a code change: :func:`state_schemas` reads the schema of every state store
(key and value; a state variable's columns), and :func:`schema_problems` compares two of them the way Spark
does on restart (types must match; field names and nullability may differ).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

from dagster_reconf.core.store.checkpoint import checkpoint_facts, partitions_at
from dagster_reconf.core.store.storage import Location, spark_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "StateSummary",
    "StoreSummary",
    "schema_problems",
    "state_schemas",
    "state_summaries",
    "state_summary",
    "stateful_operators",
    "store_reads",
]


@dataclass(frozen=True)
class StoreSummary:
    """Rows and checksum of one state store of one stateful operator."""

    operator_id: int
    operator: str
    store: str
    rows: int
    checksum: str  # exact decimal sum of row hashes, as text
    partitions_with_rows: int
    max_partition_id: int

    @property
    def key(self) -> str:
        return f"{self.operator_id}/{self.store}"


@dataclass(frozen=True)
class StateSummary:
    """Every state store of a checkpoint at one batch."""

    checkpoint: str
    batch_id: int | None  # the batch whose state was read (None: the checkpoint has no committed batch)
    partitions: int | None  # the state partitions the checkpoint records for that batch
    stores: list[StoreSummary] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.stores)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StateSummary":
        return cls(
            data["checkpoint"], data["batch_id"], data["partitions"], [StoreSummary(**s) for s in data["stores"]]
        )

    def differences(self, after: "StateSummary", partitions: int) -> list[str]:
        """Why ``after`` is not this state in ``partitions`` partitions (empty: verified)."""
        problems = []
        mine, theirs = {s.key: s for s in self.stores}, {s.key: s for s in after.stores}
        for key in sorted(set(mine) | set(theirs)):
            old, new = mine.get(key), theirs.get(key)
            if old is None or new is None:
                problems.append(f"state store {key} exists only {'after' if old is None else 'before'} the migration")
                continue
            if old.rows != new.rows:
                problems.append(f"state store {key}: {old.rows} rows before, {new.rows} after")
            elif old.checksum != new.checksum:
                problems.append(
                    f"state store {key}: same {old.rows} rows but keys or values differ (checksum "
                    f"{old.checksum} before, {new.checksum} after)"
                )
            if new.max_partition_id >= partitions:
                problems.append(
                    f"state store {key}: rows in partition {new.max_partition_id}, beyond the planned "
                    f"{partitions} partitions"
                )
        if after.partitions != partitions:
            problems.append(f"checkpoint records {after.partitions} state partitions, the plan {partitions}")
        return problems


def stateful_operators(spark: SparkSession, checkpoint: Location) -> list[dict[str, Any]]:
    """``operator_id``, ``operator`` and ``store`` of every state store (state-metadata source), with the state
    variables of a ``transformWithState`` operator (``variables``: name, type and whether it has a TTL; else [])."""
    rows = spark.read.format("state-metadata").load(spark_uri(checkpoint)).collect()
    return [
        {
            "operator_id": int(r["operatorId"]),
            "operator": str(r["operatorName"]),
            "store": str(r["stateStoreName"]),
            "variables": _state_variables(r.asDict().get("operatorProperties")),
        }
        for r in rows
    ]


def _state_variables(properties: str | None) -> list[dict[str, Any]]:
    """The state variables in an operator's v2 metadata properties (JSON), in Spark's order."""
    try:
        variables = json.loads(properties or "{}").get("stateVariables") or []
    except (json.JSONDecodeError, AttributeError):
        return []
    return [
        {"name": str(v["stateName"]), "type": str(v["stateVariableType"]), "ttl": bool(v.get("ttlEnabled"))}
        for v in variables
        if isinstance(v, dict) and "stateName" in v
    ]


def store_reads(
    spark: SparkSession, checkpoint: Location, store: dict[str, Any], batch_id: int | None
) -> list[tuple[str, DataFrame]]:
    """``(store label, rows)`` for every part of one operator's state: the store, or each of its state variables."""

    def reader(**options: Any):
        read = spark.read.format("statestore").option("operatorId", store["operator_id"])
        read = read.option("storeName", store["store"])
        for key, value in {**options, **({"batchId": batch_id} if batch_id is not None else {})}.items():
            read = read.option(key, value)
        return read

    location = spark_uri(checkpoint)
    if not store.get("variables"):
        return [(store["store"], reader().load(location))]
    return [
        (
            f"{store['store']}/{variable['name']}",
            (
                reader(readRegisteredTimers="true")
                if variable["type"] == "TimerState"
                else reader(stateVarName=variable["name"])
            ).load(location),
        )
        for variable in store["variables"]
    ]


def _content(frame: DataFrame) -> list[str]:
    """The columns that hold state (all but the partition id)."""
    return [c for c in frame.columns if c != "partition_id"]


def state_summary(spark: SparkSession, checkpoint: Location, batch_id: int | None = None) -> StateSummary:
    """Rows and checksums of every state store of ``checkpoint`` at ``batch_id`` (default: the last committed)."""
    return state_summaries(spark, [(checkpoint, batch_id)])[0]


def state_summaries(spark: SparkSession, reads: Sequence[tuple[Location, int | None]]) -> list[StateSummary]:
    """:func:`state_summary` of several ``(checkpoint, batch_id)`` reads, in one Spark job.

    A verification reads the state before and after a migration while the stream is
    paused: one job instead of two pays the job's fixed costs once, and both scans run
    side by side on the executors.
    """
    from pyspark.sql import functions as F

    plans = []  # (checkpoint, batch id, stores) per read
    parts = []
    for read_index, (checkpoint, batch_id) in enumerate(reads):
        if batch_id is None:
            batch_id = checkpoint_facts(checkpoint).last_committed_batch
        stores = [
            (store, label, frame)
            for store in stateful_operators(spark, checkpoint)
            for label, frame in store_reads(spark, checkpoint, store, batch_id)
        ]
        plans.append((checkpoint, batch_id, stores))
        for store_index, (_, _, frame) in enumerate(stores):
            parts.append(
                frame.agg(
                    F.lit(read_index).alias("read_index"),
                    F.lit(store_index).alias("store_index"),
                    F.count(F.lit(1)).alias("rows"),
                    F.coalesce(
                        F.sum(F.xxhash64(*_content(frame)).cast("decimal(38,0)")), F.lit(0).cast("decimal(38,0)")
                    ).alias("checksum"),
                    F.countDistinct("partition_id").alias("partitions_with_rows"),
                    F.coalesce(F.max("partition_id"), F.lit(-1)).alias("max_partition_id"),
                )
            )
    rows = (
        {(r["read_index"], r["store_index"]): r for r in reduce(lambda a, b: a.unionByName(b), parts).collect()}
        if parts
        else {}
    )
    summaries = []
    for read_index, (checkpoint, batch_id, stores) in enumerate(plans):
        found = [rows[read_index, i] for i in range(len(stores))]
        summaries.append(
            StateSummary(
                spark_uri(checkpoint),
                batch_id,
                partitions_at(checkpoint, batch_id),
                [
                    StoreSummary(
                        store["operator_id"],
                        store["operator"],
                        label,
                        int(row["rows"]),
                        str(row["checksum"]),
                        int(row["partitions_with_rows"]),
                        int(row["max_partition_id"]),
                    )
                    for (store, label, _), row in zip(stores, found, strict=True)
                ],
            )
        )
    return summaries


def state_schemas(spark: SparkSession, checkpoint: Location) -> dict[str, dict[str, Any]]:
    """The schema (Spark JSON) of every column of every state store or state variable, keyed
    ``<operator id>/<store label>``: ``{"operator": name, "key": ..., "value": ..., ...}``."""
    schemas = {}
    for store in stateful_operators(spark, checkpoint):
        for label, frame in store_reads(spark, checkpoint, store, None):
            columns = {c: json.loads(frame.schema[c].dataType.json()) for c in _content(frame)}
            schemas[f"{store['operator_id']}/{label}"] = {"operator": store["operator"], **columns}
    return schemas


def _shape(data_type: Any) -> Any:
    """A schema with field names and nullability removed (what Spark's compatibility check ignores)."""
    if isinstance(data_type, dict):
        kind = data_type.get("type")
        if kind == "struct":
            return ["struct", [_shape(f["type"]) for f in data_type["fields"]]]
        if kind == "array":
            return ["array", _shape(data_type["elementType"])]
        if kind == "map":
            return ["map", _shape(data_type["keyType"]), _shape(data_type["valueType"])]
        return data_type
    return data_type


def schema_problems(stored: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[str]:
    """Why state written with schemas ``stored`` cannot be read by code whose state has schemas ``new``."""
    problems = []
    for key in sorted(set(stored) | set(new)):
        if key not in new:
            problems.append(f"state store {key} ({stored[key]['operator']}) is not in the new code")
        elif key not in stored:
            problems.append(f"the new code adds state store {key} ({new[key]['operator']}), which the checkpoint lacks")
        else:
            for part in sorted((set(stored[key]) | set(new[key])) - {"operator"}):
                if _shape(stored[key].get(part)) != _shape(new[key].get(part)):
                    problems.append(
                        f"state store {key} ({stored[key]['operator']}): {part} schema "
                        f"{_describe(stored[key].get(part))} in the checkpoint, {_describe(new[key].get(part))} in the "
                        "new code"
                    )
    return problems


def _describe(data_type: dict[str, Any]) -> str:
    if isinstance(data_type, dict) and data_type.get("type") == "struct":
        return "<" + ", ".join(f"{f['name']}: {_describe(f['type'])}" for f in data_type["fields"]) + ">"
    return str(data_type if not isinstance(data_type, dict) else data_type.get("type"))
