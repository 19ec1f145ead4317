"""The operator zoo on real Spark: one small stream per stateful operator Spark 4 ships
(``tests/user_streams/operators.py``), each through a native migration 2 -> 4, a cores change and a replay 4 -> 3
while it runs. Each change either succeeds with a verification that read every state store and state variable, or is
refused at preflight with the operator and the reason; at the end the output equals a batch job over the same input
(nothing lost, nothing twice). The operators a precopy's catch-up merges also replay several batches as one, ending
with the live state.

Each case's runtime owns its SparkSession (a cores change on ``local[N]`` needs a new SparkContext); the JVM is shared.
"""

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.progress.state_rows import state_counts_by_batch
from dagster_reconf.core.reconfig import ExecutionPlan, LocalStream, ReconfigurationRefused, Reconfigurer
from dagster_reconf.core.reconfig.operators import OPERATOR_KINDS, merge_problems, operator_problems
from dagster_reconf.core.reconfig.verification import delta_problems, verify_migration
from dagster_reconf.core.spark.batch_replay import replay_merged
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.spark.state_reader import state_summaries
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.checkpoint import (
    checkpoint_facts,
    copy_checkpoint_as_of,
    operator_metadata,
    renew_query_id,
)
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.core.store.storage import spark_uri
from tests.user_streams.operators import OPERATORS, SENTINEL_TS, OperatorOptions, expected

from .conftest import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

EPOCH = 1_000_000  # event time of the first input file, in seconds
CHANGES = (  # label, plan change, strategy
    ("native 2->4", {"state_partitions": 4}, "native"),
    ("cores 1->2", {"master": "local[2]"}, "native"),
    ("replay 4->3", {"state_partitions": 3}, "replay"),
)
PRECOPY = ("precopy 3->2", {"state_partitions": 2}, "precopy")  # the native repartition of a copy, then replays: once
# Spark's name for each case's operators in the checkpoint metadata: every kind the README's table lists is here
SPARK_NAMES = {
    "aggregation": ["stateStoreSave"],
    "dropDuplicates": ["dedupe"],
    "dropDuplicatesWithinWatermark": ["dedupeWithinWatermark"],
    "session_window": ["sessionWindowStateStoreSaveExec"],
    "inner_join": ["symmetricHashJoin"],
    "left_outer_join": ["symmetricHashJoin"],
    "applyInPandasWithState": ["applyInPandasWithState"],
    "transformWithState": ["transformWithStateInPandasExec"],
    "transformWithState_timers": ["transformWithStateInPandasExec"],
    "transformWithState_ttl": ["transformWithStateInPandasExec"],
    "transformWithState_rows": ["transformWithStateInPySparkExec"],
    "chained_aggregations": ["stateStoreSave", "stateStoreSave"],
}


def _ts(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat()


def key(n: int) -> int:
    """Keys 0-4 in every file; key 9 only in the first three files, so its state (and timer) is written before the
    first migration only and must come through every change untouched."""
    return 9 if n < 30 and n % 10 == 9 else n % 5


class Events:
    """Input files: file i holds ids 10i..10i+9 at event time EPOCH + 100 i + id % 10, and again the first three ids
    of file i-1 (duplicates); the right side holds a match 2 s later for each id not divisible by 3."""

    def __init__(self, root: Path) -> None:
        self.left, self.right, self.files = root / "left", root / "right", 0
        self.left.mkdir(parents=True)
        self.right.mkdir(parents=True)

    def _drop(self, directory: Path, rows: list[dict]) -> None:
        path = directory / f"events-{self.files:05d}.json"
        temporary = directory / f".{path.name}.tmp"  # hidden: Spark lists whole files only
        temporary.write_text("".join(json.dumps(row) + "\n" for row in rows))
        temporary.rename(path)

    def write(self, files: int) -> None:
        for _ in range(files):
            i = self.files
            ids = list(range(10 * i, 10 * i + 10)) + (list(range(10 * i - 10, 10 * i - 7)) if i else [])
            rows = [{"id": n, "k": key(n), "ts": _ts(EPOCH + 100 * (n // 10) + n % 10)} for n in ids]
            self._drop(self.left, rows)
            matches = [
                {"rid": n, "rv": 10 * n, "rts": _ts(EPOCH + 100 * (n // 10) + n % 10 + 2)}
                for n in range(10 * i, 10 * i + 10)
                if n % 3
            ]
            self._drop(self.right, matches)
            self.files += 1

    def close_everything(self) -> None:
        """The sentinel: an event far in the future on both sides moves the watermark past every input event."""
        self._drop(self.left, [{"id": -1, "k": -1, "ts": _ts(SENTINEL_TS)}])
        self._drop(self.right, [{"rid": -1, "rv": 0, "rts": _ts(SENTINEL_TS)}])
        self.files += 1


def start(tmp_path: Path, operator: str, events: Events) -> StreamRuntime:
    options = OperatorOptions(
        operator=operator, left_dir=str(events.left), right_dir=str(events.right), output_dir=str(tmp_path / "out")
    )
    spec = StreamSpec(
        name=f"op_{operator}".lower(),
        entrypoint="tests.user_streams.operators:stateful",
        options=options.model_dump(),
        master="local[1]",
        state_partitions=2,
        trigger_interval_s=2.0 if OPERATORS[operator].every_trigger else 0.5,  # a replay re-runs every batch
        spark_conf={"spark.ui.enabled": "false"},
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path / "home", spec.name))  # it owns its session
    runtime.start()
    drain(runtime)
    return runtime


def reconfigure(runtime: StreamRuntime, events: Events, strategy: str, **changes):
    """Apply plan knob ``changes``; two more input files arrive while the stream is paused (the resumed query catches
    up)."""
    plan = ExecutionPlan.of_changes(runtime.spec, changes)
    ledger = AuditLedger(default_ledger_url(runtime.paths.home))

    def arrive(step: str) -> None:
        if step == "pause":
            events.write(2)

    reconfigurer = Reconfigurer(
        LocalStream(runtime), ledger, strategy=strategy, observe_timeout_s=20, after_step=arrive
    )
    return reconfigurer.run(plan)


def drain(runtime: StreamRuntime) -> None:
    """Process every input file written so far. A query that runs a batch every trigger never has "nothing left"
    for ``processAllAvailable``: there, two batches planned after the last file was written read it."""
    if not OPERATORS[runtime.spec.options["operator"]].every_trigger:
        runtime.query.processAllAvailable()
        return
    written = checkpoint_facts(runtime.paths.checkpoint).last_offset_batch or 0
    wait_until(
        lambda: (checkpoint_facts(runtime.paths.checkpoint).last_committed_batch or -1) >= written + 2,
        timeout_s=120,
        what="two batches after the last input file",
    )


def settle(runtime: StreamRuntime) -> None:
    """Process every input file, then the batches without data that a moved watermark runs (a processing-time
    ``transformWithState`` runs one every trigger for its timers: a few rounds, not until they stop)."""
    last = -2
    for _ in range(4):
        drain(runtime)
        time.sleep(1.5)  # three triggers: a watermark that moved runs a batch without data
        batch = checkpoint_facts(runtime.paths.checkpoint).last_committed_batch
        if batch == last:
            return
        last = batch


def assert_output_is_exact(runtime: StreamRuntime, operator: str, out: Path) -> int:
    spark = runtime.spark
    options = OperatorOptions.model_validate(runtime.spec.options)
    got = spark.read.parquet(str(out)).where("k >= 0")
    want = expected(spark, options)
    columns = want.columns
    if OPERATORS[operator].compare == "latest":
        newest = got.groupBy(*OPERATORS[operator].key).agg({"batch": "max"}).withColumnRenamed("max(batch)", "batch")
        got = got.join(newest, [*OPERATORS[operator].key, "batch"])
    rows = sorted(tuple(r) for r in got.select(*columns).collect())
    wanted = sorted(tuple(r) for r in want.collect())
    assert rows == wanted, (operator, len(rows), len(wanted), sorted(set(rows) ^ set(wanted))[:5])
    return len(rows)


@pytest.mark.parametrize("operator", list(OPERATORS))
def test_every_stateful_operator_migrates_exactly_or_is_refused(tmp_path, operator):
    events = Events(tmp_path / "in")
    events.write(3)
    runtime = start(tmp_path, operator, events)
    outcomes = {}
    try:
        found = operator_metadata(runtime.paths.checkpoint)
        assert [o.name for o in found] == SPARK_NAMES[operator] and operator_problems(found, "native") == []
        for label, change, strategy in CHANGES + ((PRECOPY,) if operator == "transformWithState" else ()):
            try:
                result = reconfigure(runtime, events, strategy, **change)
            except ReconfigurationRefused as refused:  # only where the operator table says so
                predicted = operator_problems(found, strategy) if "state_partitions" in change else []
                assert predicted and predicted[0] in refused.problems, refused
                outcomes[label] = f"refused: {predicted[0]}"
                continue
            assert result.outcome == "succeeded", (label, result.outcome, result.reason)
            if "state_partitions" in change:
                assert result.verification.ok and result.verification.stores, label
                outcomes[label] = {
                    "pause_s": result.observation.pause_s,
                    "downtime_s": result.observation.downtime_s,
                    "stores": sorted(s["store"] for s in result.verification.stores),
                }
            else:
                assert runtime.spark.sparkContext.master == "local[2]"
                outcomes[label] = {"pause_s": result.observation.pause_s, "downtime_s": result.observation.downtime_s}
            drain(runtime)
        events.close_everything()
        settle(runtime)
        assert runtime.query.exception() is None
        rows = assert_output_is_exact(runtime, operator, tmp_path / "out")
    finally:
        runtime.shutdown()
    print(f"OPERATOR {operator}: rows={rows} {json.dumps(outcomes)}")


MERGED = ("aggregation", "dropDuplicates", "session_window", "chained_aggregations")


@pytest.mark.parametrize("operator", MERGED)
def test_a_merged_catch_up_leaves_the_state_the_batches_one_by_one_left(tmp_path, operator):
    """A precopy's catch-up as one batch (``replay_merged``) over batches that arrived one file at a time ends with
    the live state, store by store, and passes the pause's counts: the evidence for the table's "merged batches"."""
    events = Events(tmp_path / "in")
    events.write(3)
    runtime = start(tmp_path, operator, events)
    try:
        live = runtime.paths.checkpoint
        copied_at = checkpoint_facts(live).last_committed_batch
        for _ in range(3):  # three batches, each with its own file, duplicates of the one before included
            events.write(1)
            drain(runtime)
        runtime.stop_at_batch_boundary()
        last = checkpoint_facts(live).last_committed_batch
        copy = tmp_path / "copy"
        copy_checkpoint_as_of(live, copy, copied_at)
        renew_query_id(copy)
        runtime.spark._streamingCheckpointManager.repartition(spark_uri(copy), 3)
        spec = runtime.spec.with_changes({"state_partitions": 3})
        run = replay_merged(runtime, live, copy, list(range(copied_at + 1, last + 1)), spec, shift=1)
        assert run["merged"] == list(range(copied_at + 1, last + 1)) and len(run["merged"]) >= 3
        counts = state_counts_by_batch(MetricsStore(runtime.paths.metrics).tail(10_000_000)[0], set(run["merged"]))
        assert delta_problems(counts, [run], shift=1) == []
        before, after = state_summaries(runtime.spark, [(live, last), (copy, last + 1)])
        verification = verify_migration(before, after, 3)
        assert verification.ok and before.rows > 0, verification.problems or verification.gx.failures
        assert merge_problems(operator_metadata(live)) == []  # what the precopy decides by
    finally:
        runtime.shutdown()


def test_the_zoo_covers_every_operator_kind_the_table_lists():
    assert set(OPERATORS) == set(SPARK_NAMES)
    listed = {name for kind in OPERATOR_KINDS for name in kind.spark_names}
    assert listed == {name for names in SPARK_NAMES.values() for name in names}
