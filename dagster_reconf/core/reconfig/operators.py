"""Which stateful operators a state migration can move, by strategy: positive evidence only.

Every kind in :data:`OPERATOR_KINDS` goes through the operator zoo (``tests/integration/test_operator_zoo.py``) on
the pinned Spark: a native migration, a cores change and a replay while it runs, each verified store by store (state
variable by state variable for ``transformWithState``: value, list and map state, TTL, timers), with the output equal
to a batch job over the same input. A precopy is a native repartition of a copy plus a replay of the batches since,
so it goes where both do. An operator Spark names otherwise (a newer Spark's, Scala's ``flatMapGroupsWithState`` or
``transformWithState``, a streaming ``limit``) has not been through it: a plan that moves its state is refused at
preflight with its name. A change that moves no state (cores, trigger, code) restarts the query from its checkpoint
as Spark does, whatever the operators.

A precopy replays several batches as one (:func:`merge_problems`) only over operators whose state after the merged
batch is the state after the batches one by one, given the same input rows dropped as late (which the replay's
verification compares), and where that was measured (``test_operator_zoo.py``, a merged catch-up against the live
state): aggregations, ``dropDuplicates`` and session windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dagster_reconf.core.spec import STRATEGIES
from dagster_reconf.core.store.checkpoint import OperatorMetadata

__all__ = ["OPERATOR_KINDS", "OperatorKind", "merge_problems", "operator_kind", "operator_problems", "operator_table"]


@dataclass(frozen=True)
class OperatorKind:
    """A stateful operator as users write it, the names Spark gives it in checkpoint metadata, and the strategies
    that cannot move its state, each with why (absent: it moves)."""

    label: str
    spark_names: tuple[str, ...]
    refused: dict[str, str] = field(default_factory=dict)
    unmergeable: str = ""  # why a replay cannot run several of its batches as one (empty: it can)


_USER_FUNCTION_PER_BATCH = "its function runs once per key and batch, and its timers fire by batch"

OPERATOR_KINDS: tuple[OperatorKind, ...] = (
    OperatorKind("streaming aggregation (groupBy, window; chained ones too)", ("stateStoreSave",)),
    OperatorKind("dropDuplicates", ("dedupe",)),
    OperatorKind(
        "dropDuplicatesWithinWatermark",
        ("dedupeWithinWatermark",),
        unmergeable="a duplicate arriving after its first copy expired starts a new entry, unless both share a batch",
    ),
    OperatorKind("session_window aggregation", ("sessionWindowStateStoreSaveExec",)),
    OperatorKind(
        "stream-stream join (inner, left outer)",
        ("symmetricHashJoin",),
        unmergeable="whether a row was matched depends on the batch its partner arrived in",
    ),
    OperatorKind(
        "applyInPandasWithState (with timeouts)", ("applyInPandasWithState",), unmergeable=_USER_FUNCTION_PER_BATCH
    ),
    OperatorKind(
        "transformWithStateInPandas (value, list, map state; timers; TTL)",
        ("transformWithStateInPandasExec",),
        unmergeable=_USER_FUNCTION_PER_BATCH,
    ),
    OperatorKind(
        "transformWithState on rows (PySpark 4.1+)",
        ("transformWithStateInPySparkExec",),
        unmergeable=_USER_FUNCTION_PER_BATCH,
    ),
)


def operator_kind(spark_name: str) -> OperatorKind | None:
    """The kind Spark's operator name belongs to (None: not one that has been through the zoo)."""
    return next((kind for kind in OPERATOR_KINDS if spark_name in kind.spark_names), None)


def operator_problems(operators: Sequence[OperatorMetadata], strategy: str) -> list[str]:
    """Why ``strategy`` cannot move the state of ``operators`` (empty: it can), a line per operator."""
    problems = []
    for operator in operators:
        kind = operator_kind(operator.name)
        if kind is None:
            problems.append(
                f"stateful operator {operator.operator_id} ({operator.name}) is not one whose state migration has "
                f"been verified on this Spark ({', '.join(k.label for k in OPERATOR_KINDS)}); its state is left "
                "as it is: change the state partitions by starting a new stream, or change only what moves no state"
            )
        elif strategy in kind.refused:
            problems.append(
                f"stateful operator {operator.operator_id} ({operator.name}): the {strategy} strategy cannot move "
                f"its state: {kind.refused[strategy]}"
            )
    return problems


def merge_problems(operators: Sequence[OperatorMetadata]) -> list[str]:
    """Why a replay of ``operators``' batches cannot run several of them as one query batch (empty: it can)."""
    problems = []
    for operator in operators:
        kind = operator_kind(operator.name)
        why = "not an operator known to merge" if kind is None else kind.unmergeable
        if why:
            problems.append(f"stateful operator {operator.operator_id} ({operator.name}): {why}")
    return problems


def operator_table() -> str:
    """The operators and what each strategy does with them, as a Markdown table (the README's)."""
    lines = [
        "| operator | Spark's name | " + " | ".join(STRATEGIES) + " | precopy's catch-up |",
        "|---|---|" + "---|" * (len(STRATEGIES) + 1),
    ]
    for kind in OPERATOR_KINDS:
        cells = [f"refused: {kind.refused[s]}" if s in kind.refused else "migrates, verified" for s in STRATEGIES]
        cells.append(f"batch by batch: {kind.unmergeable}" if kind.unmergeable else "merged batches")
        lines.append(f"| {kind.label} | {', '.join(f'`{n}`' for n in kind.spark_names)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
