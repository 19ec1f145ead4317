"""Did a state migration keep the state? Compare summaries, and let Great Expectations check it too.

:func:`verify_migration` puts the before and after :class:`~dagster_reconf.core.spark.state_reader.StateSummary` side by
side, one row per state store, and runs a GX suite over that table: rows equal,
checksums equal, no row beyond the planned partitions, every store present. The same
facts are also checked in plain Python, so a failure reads as one sentence per store.

A precopy is verified that way before the pause, while the stream runs (its copy against the
live state at the batch the copy reached); in the pause only the batches replayed since are
checked, by :func:`delta_problems`: each must have changed the copy's state as the live
batch changed the live state (Spark's row counts per stateful operator), so the pause does not
read the whole state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dagster_reconf.core.progress.state_rows import StateCounts, state_counts_by_batch
from dagster_reconf.core.reconfig.step_results import MigrateResult
from dagster_reconf.core.spark.state_reader import StateSummary, StoreSummary
from dagster_reconf.core.traces.expectations import ValidationOutcome, gx_module, validate_frame

__all__ = [
    "MigrationVerification",
    "delta_problems",
    "precopy_delta",
    "verification_table",
    "verify_migration",
    "warm_up_verification",
]


@dataclass
class MigrationVerification:
    """The verdict on one migration: problems (empty: verified), the table and GX's outcome."""

    problems: list[str]
    table: pd.DataFrame
    gx: ValidationOutcome
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems and self.gx.success

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": self.problems,
            "gx": {"success": self.gx.success, "evaluated": self.gx.evaluated, "failures": self.gx.failures},
            "stores": self.table.to_dict(orient="records"),
            **self.details,
        }


def verification_table(before: StateSummary, after: StateSummary, partitions: int) -> pd.DataFrame:
    """One row per state store: rows and checksums before and after, partitions used and planned."""
    mine, theirs = {s.key: s for s in before.stores}, {s.key: s for s in after.stores}
    rows = []
    for key in sorted(set(mine) | set(theirs)):
        old, new = mine.get(key), theirs.get(key)
        rows.append(
            {
                "store": key,
                "operator": (old or new).operator,  # type: ignore[union-attr]
                "rows_before": old.rows if old else -1,
                "rows_after": new.rows if new else -1,
                "checksum_before": old.checksum if old else "",
                "checksum_after": new.checksum if new else "",
                "max_partition_id": new.max_partition_id if new else -1,
                "planned_partitions": partitions,
                "checkpoint_partitions": after.partitions if after.partitions is not None else -1,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "store",
            "operator",
            "rows_before",
            "rows_after",
            "checksum_before",
            "checksum_after",
            "max_partition_id",
            "planned_partitions",
            "checkpoint_partitions",
        ],
    )


def verify_migration(before: StateSummary, after: StateSummary, partitions: int) -> MigrationVerification:
    """Compare the state before and after a migration to ``partitions`` partitions."""
    table = verification_table(before, after, partitions)
    problems = before.differences(after, partitions)
    gx = gx_module()
    expectations = [
        gx.expectations.ExpectTableRowCountToEqual(value=len(before.stores)),
        gx.expectations.ExpectColumnPairValuesToBeEqual(column_A="rows_before", column_B="rows_after"),
        gx.expectations.ExpectColumnPairValuesToBeEqual(column_A="checksum_before", column_B="checksum_after"),
        gx.expectations.ExpectColumnValuesToBeBetween(
            column="max_partition_id", min_value=-1, max_value=partitions - 1
        ),
        gx.expectations.ExpectColumnValuesToBeInSet(column="checkpoint_partitions", value_set=[partitions]),
    ]
    outcome = (
        validate_frame(table, "state_migration", expectations)
        if len(table)
        else ValidationOutcome(
            not before.stores and not after.stores,
            0,
            [] if not after.stores else ["state stores appeared from nowhere"],
        )
    )
    return MigrationVerification(problems, table, outcome, {"rows": before.rows, "partitions": partitions})


def delta_problems(live: dict[int, StateCounts], replays: list[dict[str, Any]], shift: int) -> list[str] | None:
    """Why batches replayed into a copy (``replays``: ids in the copy, ``shift`` past the live ones, and their ``state``
    counts) did not change its state as the live batches did (empty: they did); None where a live batch's counts are
    not known (the whole state must be compared instead).

    A replay of several batches as one (``merged``) must end with the last one's rows and drop as many input rows as
    late as all of them: every batch's watermark is at most the merged one's, so equal counts are the same rows.
    """
    problems = []
    for replay in replays:
        merged = replay.get("merged") or [replay["batch_id"] - shift]
        if replay.get("state") is None or any(batch not in live for batch in merged):
            return None
        last = merged[-1]
        if len(merged) == 1:
            if replay["state"] != live[last]:
                problems.append(
                    f"live batch {last} left state rows {live[last]}, its replay into the copy (batch "
                    f"{replay['batch_id']}) {replay['state']}"
                )
            continue
        expected = _merged_counts([live[batch] for batch in merged])
        got = [{k: op.get(k) for k in _MERGED_COUNTS} for op in replay["state"]]
        if expected is None:
            return None
        if got != expected:
            problems.append(
                f"live batches {merged[0]}-{last} left state rows {expected}, their replay as one batch into the copy "
                f"(batch {replay['batch_id']}) {got}"
            )
    return problems


_MERGED_COUNTS = ("numRowsTotal", "numRowsDroppedByWatermark")


def _merged_counts(batches: list[StateCounts]) -> StateCounts | None:
    """What one batch replaying ``batches`` must report: the last one's rows, and every row they dropped as late
    (None: a batch does not say)."""
    if len({len(counts) for counts in batches}) != 1:
        return None
    merged = []
    for ops in zip(*batches):
        dropped = [op.get("numRowsDroppedByWatermark") for op in ops]
        if any(d is None for d in dropped):
            return None
        merged.append({"numRowsTotal": ops[-1].get("numRowsTotal"), "numRowsDroppedByWatermark": sum(dropped)})
    return merged


def precopy_delta(
    precopy: dict[str, Any],
    migrated: MigrateResult,
    paused_batch: int | None,
    metrics_tail: Callable[[], list[dict[str, Any]]],
) -> dict[str, Any] | None:
    """A precopy verified before the pause: only the batches replayed since are checked, against the live ones' row
    counts in the stream's metrics (:func:`delta_problems`). None where that cannot tell: the whole state then."""
    verified = precopy.get("verified")
    if not verified or migrated.strategy != "precopy" or migrated.fell_back or migrated.skipped:  # the whole state
        return None
    replays = [
        run for run in precopy.get("replays", []) + migrated.replays if run["batch_id"] - 1 > verified["live_batch"]
    ]  # replayed after the copy was verified
    if any(len(run.get("merged") or []) > 1 for run in replays) and not verified.get("merged_runs"):
        return None  # merging was never compared with the whole state for this query: that compares it now
    batches = {b for run in replays for b in run.get("merged") or [run["batch_id"] - 1]}
    live = state_counts_by_batch(metrics_tail(), batches)
    problems = delta_problems(live, replays, shift=1)
    if problems is None:
        return None
    return {
        "ok": not problems,
        "problems": problems,
        "delta_batches": len(replays),
        "copy_verified_at": verified["live_batch"],
        "stores": verified["stores"],
        "before_batch": paused_batch,
        "after_batch": migrated.batch_id,
    }


def warm_up_verification() -> None:
    """Verify a made-up migration once, so the real one (inside the pause) finds GX imported and warm.

    A cold first validation costs about 3.5 s here, all of it downtime if paid during the pause.
    """
    store = StoreSummary(0, "warm-up", "default", rows=1, checksum="0", partitions_with_rows=1, max_partition_id=0)
    summary = StateSummary("warm-up", 0, 1, [store])
    verify_migration(summary, summary, 1)
