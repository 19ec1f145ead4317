"""Execution plans (Trisk's three dimensions) and the diff that says what a change costs.

An :class:`ExecutionPlan` is the whole configuration of one stream that a
reconfiguration may change, grouped as Trisk groups it:

* ``resources``: where and on how much it runs (master URL, cores, executor size);
* ``partitioning``: how the work is split (state partitions of the stateful
  operators, source partitions, batch sizing: trigger interval and events per trigger);
* ``logic``: which version of the query's code runs (its state schema must stay
  compatible with the checkpoint).

:func:`diff_plans` compares the plan in force with a target and lists exactly the
actions needed, each with what it costs: a query restart, a new SparkContext in the
same driver, or a state migration (which needs a pause at a batch boundary and an
offline rewrite of the checkpoint). A cores change within the spec's ``cores_ceiling``
on a standalone master adds or removes executors in the same SparkContext instead of a
new one. Parts that did not change produce no action.

Spark keeps one partition count for every stateful operator of a query (the
checkpoint pins ``spark.sql.shuffle.partitions``, and the offline repartition rewrites
all operators together), so a plan may name operators but must give them one count.
Stateless shuffles of a stateful query inherit the same pinned count, which is why the
plan has no separate knob for them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dagster_reconf.core.errors import SpecError, validated
from dagster_reconf.core.spec import MAX_PER_TRIGGER, SESSION_FIELDS, MasterUrl, RestartScope, StreamSpec, context_scope

__all__ = ["Action", "ExecutionLogic", "ExecutionPlan", "Partitioning", "PlanDiff", "Resources", "diff_plans"]

Effect = Literal["query_restart", "executor_resize", "session_restart", "state_migration"]
_EFFECT_ORDER: dict[str, int] = {"query_restart": 1, "executor_resize": 2, "session_restart": 3, "state_migration": 4}
_EFFECT_OF_SCOPE = {RestartScope.EXECUTORS: "executor_resize", RestartScope.SESSION: "session_restart"}


class Resources(BaseModel):
    """Where the stream runs and on how much."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    master: MasterUrl = Field(..., description="Spark master URL: local[N], spark://HOST:PORT, k8s://..., yarn.")
    executor_cores: int | None = Field(None, ge=1, le=1024, description="Cores per executor (cluster masters).")
    max_cores: int | None = Field(
        None, ge=1, le=100_000, description="spark.cores.max: the application's cores (cluster masters)."
    )
    cores_ceiling: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Standalone masters: max_cores up to this "
        "changes by adding and removing executors in the same SparkContext.",
    )
    executor_memory: str | None = Field(None, pattern=r"^\d+[kmgt]?$", description="Executor memory, e.g. 2g.")


class Partitioning(BaseModel):
    """How the work is split."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state_partitions: int | dict[str, int] = Field(
        ...,
        description="State partitions of every stateful operator, or per operator id "
        "(one count for all: Spark's rule).",
    )
    source_partitions: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="Partitions the source splits a micro-batch into (None: the source has no such knob).",
    )
    trigger_interval_s: float = Field(..., ge=0, le=3600, description="Processing-time trigger interval in seconds.")
    max_per_trigger: int | None = Field(
        None, ge=1, le=MAX_PER_TRIGGER, description="Cap per micro-batch in the source's own unit (None: no cap)."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_separate_shuffle_partitions(cls, data: Any) -> Any:
        for key in ("shuffle_partitions", "stateless_shuffle_partitions"):
            if isinstance(data, dict) and key in data:
                raise ValueError(
                    f"{key} cannot be set on its own: a streaming checkpoint pins spark.sql.shuffle.partitions for "
                    "every shuffle of the query, stateless ones included; change state_partitions instead (the "
                    "state is migrated and every shuffle follows)"
                )
        return data

    @field_validator("state_partitions")
    @classmethod
    def _positive(cls, value: int | dict[str, int]) -> int | dict[str, int]:
        counts = value.values() if isinstance(value, dict) else [value]
        if isinstance(value, dict) and not value:
            raise ValueError("name at least one operator, or give one count for all")
        bad = [c for c in counts if not 1 <= c <= 10_000]
        if bad:
            raise ValueError(f"state partitions must be between 1 and 10000, got {bad[0]}")
        return value

    @property
    def state_partition_count(self) -> int:
        """The one count every stateful operator gets (see module docstring)."""
        if isinstance(self.state_partitions, int):
            return self.state_partitions
        counts = sorted(set(self.state_partitions.values()))
        if len(counts) > 1:
            raise SpecError(
                f"partitioning.state_partitions gives operators different counts {self.state_partitions}; Spark "
                "repartitions every stateful operator of a query together: give them one count"
            )
        return counts[0]


class ExecutionLogic(BaseModel):
    """Which version of the query's code runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code_version: str = Field("1", min_length=1, max_length=64, description="Version of the query's logic.")


class ExecutionPlan(BaseModel):
    """The configuration of one stream a reconfiguration can change (see module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stream: str = Field(..., description="The managed stream this plan is for.")
    resources: Resources
    partitioning: Partitioning
    logic: ExecutionLogic = Field(default_factory=ExecutionLogic)

    @classmethod
    def parse(cls, data: Any) -> "ExecutionPlan":
        """Validate a plan (a dict, or its JSON text); errors name each bad field and its value.

        Raises:
            SpecError: the plan is not valid.
        """
        if isinstance(data, (str, bytes)):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as exc:
                raise SpecError(f"execution plan is not JSON: {exc.msg} at position {exc.pos}") from None
        if not isinstance(data, dict):
            raise SpecError(f"execution plan must be a JSON object, got {type(data).__name__}")
        return validated(cls, data, "execution plan")

    @classmethod
    def of(cls, spec: StreamSpec) -> "ExecutionPlan":
        """The plan a stream's settings amount to."""
        return cls(
            stream=spec.name,
            resources=Resources(**{name: getattr(spec, name) for name in Resources.model_fields}),
            partitioning=Partitioning(**{name: getattr(spec, name) for name in Partitioning.model_fields}),
            logic=ExecutionLogic(code_version=spec.code_version),
        )

    @classmethod
    def of_changes(cls, spec: StreamSpec, changes: dict[str, Any]) -> "ExecutionPlan":
        """The plan ``spec`` with ``changes`` amounts to; refuses changes that are not plan knobs, which :meth:`of`
        would drop without a word (``options``, ``spark_conf``: a restart changes those)."""
        knobs = cls.of(spec).settings()
        unplanned = sorted(set(changes) - set(knobs))
        if unplanned:
            raise SpecError(
                f"a plan changes its knobs ({', '.join(knobs)}), and {unplanned} are not among them; other "
                f"spec settings change with `reconf stream restart {spec.name} --set KEY=VALUE`"
            )
        return cls.of(spec.with_changes(changes))

    def settings(self) -> dict[str, Any]:
        """The stream spec fields this plan sets."""
        return {
            "master": self.resources.master,
            "executor_cores": self.resources.executor_cores,
            "max_cores": self.resources.max_cores,
            "cores_ceiling": self.resources.cores_ceiling,
            "executor_memory": self.resources.executor_memory,
            "state_partitions": self.partitioning.state_partition_count,
            "source_partitions": self.partitioning.source_partitions,
            "trigger_interval_s": self.partitioning.trigger_interval_s,
            "max_per_trigger": self.partitioning.max_per_trigger,
            "code_version": self.logic.code_version,
        }

    def apply_to(self, spec: StreamSpec) -> StreamSpec:
        """``spec`` with this plan's settings (validated: an unknown code version is refused here)."""
        if spec.name != self.stream:
            raise SpecError(f"plan is for stream {self.stream!r}, not {spec.name!r}")
        return spec.with_changes(self.settings())

    @property
    def plan_hash(self) -> str:
        """Stable 16-hex-digit hash of the plan's settings (its identity in run keys and the ledger)."""
        core = {"stream": self.stream, **self.settings()}
        return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Action:
    """One change a reconfiguration makes, and what it costs."""

    dimension: Literal["resources", "partitioning", "logic"]
    knob: str
    before: Any
    after: Any
    effect: Effect
    operators: tuple[str, ...] = ()

    def describe(self) -> str:
        where = f" (operators {', '.join(self.operators)})" if self.operators else ""
        return f"{self.knob}: {self.before!r} -> {self.after!r}{where}: {self.effect.replace('_', ' ')}"


_DIMENSION = {
    "master": "resources",
    "executor_cores": "resources",
    "max_cores": "resources",
    "cores_ceiling": "resources",
    "executor_memory": "resources",
    "state_partitions": "partitioning",
    "source_partitions": "partitioning",
    "trigger_interval_s": "partitioning",
    "max_per_trigger": "partitioning",
    "code_version": "logic",
}


@dataclass(frozen=True)
class PlanDiff:
    """The actions from one plan to another (empty: nothing to do)."""

    actions: tuple[Action, ...] = field(default_factory=tuple)

    @property
    def empty(self) -> bool:
        return not self.actions

    @property
    def needs_pause(self) -> bool:
        """Every change restarts the query, so any action pauses it at a batch boundary (only this stream)."""
        return bool(self.actions)

    @property
    def needs_migration(self) -> bool:
        return any(a.effect == "state_migration" for a in self.actions)

    @property
    def needs_new_session(self) -> bool:
        return any(a.effect == "session_restart" for a in self.actions)

    @property
    def effect(self) -> str:
        """The costliest effect, or ``none``."""
        return max((a.effect for a in self.actions), key=_EFFECT_ORDER.__getitem__, default="none")

    def settings_changes(self) -> dict[str, Any]:
        """Spec fields to change, with their new values."""
        return {a.knob: a.after for a in self.actions}

    def as_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "dimension": a.dimension,
                "knob": a.knob,
                "before": a.before,
                "after": a.after,
                "effect": a.effect,
                "operators": list(a.operators),
            }
            for a in self.actions
        ]


def diff_plans(
    current: ExecutionPlan, target: ExecutionPlan, spec: StreamSpec, stateful_operators: tuple[str, ...] = ()
) -> PlanDiff:
    """What changes from ``current`` (in force for ``spec``) to ``target``.

    Args:
        stateful_operators: the checkpoint's stateful operators, named in state migrations (none: the stream is
            stateless, and its state partitions only restart the query).

    Raises:
        SpecError: the plans are for different streams, or the target is not valid for the stream.
    """
    if current.stream != target.stream:
        raise SpecError(f"plans are for different streams: {current.stream!r} and {target.stream!r}")
    new = target.apply_to(spec)  # a target the stream cannot take fails before any action is listed
    context = context_scope(spec, new)  # what the SparkContext needs: one answer for every resource knob
    before, after = current.settings(), target.settings()
    stateful = bool(stateful_operators)
    actions = []
    for knob in before:
        if before[knob] == after[knob]:
            continue
        if knob == "state_partitions" and stateful:
            effect: Effect = "state_migration"
        else:
            effect = _EFFECT_OF_SCOPE.get(context, "query_restart") if knob in SESSION_FIELDS else "query_restart"  # type: ignore[assignment]
        operators = stateful_operators if effect == "state_migration" else ()
        actions.append(Action(_DIMENSION[knob], knob, before[knob], after[knob], effect, operators))  # type: ignore[arg-type]
    return PlanDiff(tuple(actions))
