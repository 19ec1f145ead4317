"""Reconfigurations of real streams in this process: state partitions 4 -> 8 -> 3 keep the state
and the output, the replay strategy rebuilds the same state, bad plans change nothing, and a
migration that fails verification is rolled back."""

import pytest

from dagster_reconf.core.errors import SpecError, StreamStateError
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.reconfig import ExecutionPlan, LocalStream, ReconfigurationRefused, Reconfigurer
from dagster_reconf.core.reconfig import precopy as precopy_module
from dagster_reconf.core.reconfig import preflight as preflight_module
from dagster_reconf.core.scaling.evidence import ConfigurationWindow
from dagster_reconf.core.spark import state_migrator as migration
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.store.checkpoint import checkpoint_facts, replay_problem
from dagster_reconf.core.store.metrics import MetricsStore
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.workloads.streams import bundled_spec

from .conftest import assert_matches_oracle, wait_until

pytestmark = pytest.mark.spark

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def start_stream(spark, tmp_path, query: str, **settings) -> StreamRuntime:
    """A stream that keeps receiving events while it is reconfigured, paced below its capacity."""
    spec = bundled_spec(
        f"rc-{query}",
        query,
        rate=600,
        max_per_trigger=3000,
        trigger_interval_s=0.5,
        source_partitions=2,
        state_partitions=4,
        vocabulary=3000,
        **settings,
    )
    runtime = StreamRuntime(spec, StreamPaths(tmp_path, spec.name), spark=spark)
    runtime.start()
    wait_until(lambda: (checkpoint_facts(runtime.paths.checkpoint).last_committed_batch or -1) >= 1, what="2 batches")
    return runtime


def plan_with(runtime: StreamRuntime, **partitioning) -> dict:
    plan = ExecutionPlan.of(runtime.spec).model_dump()
    plan["partitioning"].update(partitioning)
    return plan


def assert_output_matches_oracle(spark, runtime: StreamRuntime) -> None:
    """Stop at a batch boundary; the output equals the oracle over every event the stream read."""
    wait_until(lambda: runtime.query.lastProgress is not None, what="a batch of the resumed query")
    runtime.stop_at_batch_boundary()
    assert_matches_oracle(spark, runtime.paths.home, runtime.spec)


@pytest.mark.parametrize("query", ["q5", "wordcount"])
def test_state_partitions_4_8_3_keep_state_and_output(spark, tmp_path, query):
    runtime = start_stream(spark, tmp_path, query)
    ledger = AuditLedger(default_ledger_url(tmp_path))
    reconfigurer = Reconfigurer(LocalStream(runtime), ledger, observe_timeout_s=15)
    for partitions in (8, 3):
        result = reconfigurer.run(plan_with(runtime, state_partitions=partitions), trigger={"user": "test"})
        assert result.outcome == "succeeded", result.results
        verification = result.verification
        assert verification.ok and verification.gx["success"], verification
        store = verification.stores[0]
        assert store["rows_before"] == store["rows_after"] > 0
        assert store["checksum_before"] == store["checksum_after"]
        assert store["max_partition_id"] < partitions
        assert checkpoint_facts(runtime.paths.checkpoint).state_partitions == partitions
        assert runtime.is_active and runtime.spec.state_partitions == partitions
        observed = result.observation
        assert observed.downtime_s is not None and observed.downtime_s >= observed.pause_s > 0
    # Several reads in one Spark job (verify's before and after) say what one read at a time says.
    stream, last = LocalStream(runtime), checkpoint_facts(runtime.paths.checkpoint).last_committed_batch
    reads = [(0, 1), (None, last)]
    together = stream.states(reads)
    assert together == [stream.state(g, b) for g, b in reads]
    assert [s["partitions"] for s in together] == [4, 3] and all(s["stores"] for s in together)
    assert_output_matches_oracle(spark, runtime)
    assert ledger.verify().ok
    finished = ledger.records(stream=runtime.spec.name, kinds=["reconfiguration.finished"])
    assert [r.payload["outcome"] for r in finished] == ["succeeded", "succeeded"]
    assert ledger.lock(runtime.spec.name) is None


def test_replay_strategy_rebuilds_the_same_state(spark, tmp_path):
    runtime = start_stream(spark, tmp_path, "q5")
    ledger = AuditLedger(default_ledger_url(tmp_path))
    result = Reconfigurer(LocalStream(runtime), ledger, strategy="replay", observe_timeout_s=15).run(
        plan_with(runtime, state_partitions=6)
    )
    assert result.outcome == "succeeded", result.results
    assert result.migrated.replayed_batches >= 2
    assert result.verification.ok, result.verification
    # The stream's metrics say how long the reconfiguration ran before its pause: a policy weighs it.
    window = ConfigurationWindow().update(MetricsStore(runtime.paths.metrics).read()[0])
    lead_s = result.timings["preflight"] + result.timings["prepare"] + result.paused.boundary_wait_s  # 0: a replay
    assert window.lead_s == pytest.approx(lead_s, abs=0.01) and result.paused.boundary_wait_s == 0.0
    assert runtime.paths.generation == 1 and runtime.paths.checkpoint.name == "checkpoint.g1"
    # The old generation's full copy of the state is removed once the stream committed on the new one.
    assert not runtime.paths.checkpoint_of(0).exists()
    assert ledger.records(stream=runtime.spec.name, kinds=["reconfiguration.finished"])[-1].payload[
        "removed_checkpoints"
    ] == [str(runtime.paths.checkpoint_of(0))]
    # The replay's batches ran under a query id of their own: the stream's traces never see them.
    assert len(set(runtime.paths.query_ids)) == 2 and str(runtime.query.id) == runtime.paths.query_ids[-1]
    assert_output_matches_oracle(spark, runtime)


def test_precopy_prepares_the_new_state_while_the_stream_runs_and_replays_only_the_rest(spark, tmp_path, monkeypatch):
    runtime = start_stream(spark, tmp_path, "q5")
    ledger = AuditLedger(default_ledger_url(tmp_path))
    reconfigurer = Reconfigurer(LocalStream(runtime), ledger, strategy="precopy", observe_timeout_s=15)
    # On a 0.5 s trigger a replayed batch (a query start plus the batch) outlasts the stream's time per batch: where
    # batches cannot replay as one (here as for a join's state), no copy is made, the native migration runs in the
    # pause and the record says why.
    wait_until(
        lambda: checkpoint_facts(runtime.paths.checkpoint).last_committed_batch >= 4, what="a history of batches"
    )
    join = "stateful operator 0 (symmetricHashJoin): whether a row was matched depends on the batch"
    with monkeypatch.context() as patched:
        patched.setattr(precopy_module, "batch_merge_problem", lambda checkpoint: join)
        patched.setattr(preflight_module, "batch_merge_problem", lambda checkpoint: join)
        slow = reconfigurer.run(plan_with(runtime, state_partitions=2))
    assert slow.outcome == "succeeded", slow.results
    assert "the copy could not catch up" in slow.results["prepare"]["precopy"]["failed"]
    assert slow.migrated.fell_back.startswith("native: a replayed batch takes about")
    assert not slow.results["preflight"]["checks"]["precopy"]["runs"] and join in slow.migrated.fell_back
    assert (
        not runtime.paths.checkpoint_of(1).exists() and checkpoint_facts(runtime.paths.checkpoint).state_partitions == 2
    )

    # A windowed count merges: each round replays the batches committed since the last one as one batch, so the
    # precopy runs on the same 0.5 s trigger, and the pause replays what is left as one batch too.
    merged = reconfigurer.run(plan_with(runtime, state_partitions=3))
    assert merged.outcome == "succeeded", merged.results
    prepared = merged.results["prepare"]["precopy"]
    assert merged.results["preflight"]["checks"]["precopy"]["merged"]
    assert "failed" not in prepared and merged.migrated.fell_back is None, (prepared, merged.migrated)
    runs = prepared["replays"] + merged.results["migrate"]["replays"]
    assert any(len(run.get("merged") or []) > 1 for run in runs), runs
    assert all(run["batch_id"] == run["merged"][-1] + 1 for run in runs if "merged" in run)  # ids stay aligned
    assert merged.verification.ok, merged.verification
    assert any("each round and the pause replaying their batches as one" in line for line in merged.explanation())
    assert runtime.paths.generation == 1 and checkpoint_facts(runtime.paths.checkpoint).state_partitions == 3
    wait_until(lambda: runtime.query.lastProgress is not None, what="a batch after the merged precopy")
    # The merged batches left gaps in the log: a replay runs each merged batch again as one, from its start entry.
    assert replay_problem(runtime.paths.checkpoint) is None
    rebuilt = Reconfigurer(LocalStream(runtime), ledger, strategy="replay", observe_timeout_s=15).run(
        plan_with(runtime, state_partitions=2)
    )
    assert rebuilt.outcome == "succeeded" and rebuilt.verification.ok, rebuilt.results
    assert runtime.paths.generation == 2 and checkpoint_facts(runtime.paths.checkpoint).state_partitions == 2

    # From here on the replay is taken to keep pace: the rest is about what the copy meets.
    monkeypatch.setattr(precopy_module, "replay_falls_behind", lambda history: None)
    # A copy that cannot be made (here a file in its way; a full disk alike) falls back to native and says why.
    blocked = runtime.paths.checkpoint_of(3)
    blocked.write_text("in the way")
    fallback = reconfigurer.run(plan_with(runtime, state_partitions=4))
    assert fallback.outcome == "succeeded", fallback.results
    assert "could not copy" in fallback.results["prepare"]["precopy"]["failed"]
    assert fallback.migrated.fell_back.startswith("native: could not copy")
    assert runtime.paths.generation == 2 and checkpoint_facts(runtime.paths.checkpoint).state_partitions == 4
    blocked.unlink()

    # A copy left too far behind by the pause (here: any delta is too far) is removed; native runs in the pause.
    with monkeypatch.context() as patched:
        patched.setattr(migration, "PRECOPY_MAX_PAUSE_BATCHES", -1)
        patched.setattr(migration, "PRECOPY_MAX_MERGED_PAUSE_BATCHES", -1)
        behind = reconfigurer.run(plan_with(runtime, state_partitions=5))
    assert behind.outcome == "succeeded", behind.results
    assert "batches behind the paused stream" in behind.migrated.fell_back
    assert not runtime.paths.checkpoint_of(3).exists() and runtime.paths.generation == 2
    assert checkpoint_facts(runtime.paths.checkpoint).state_partitions == 5

    wait_until(
        lambda: (checkpoint_facts(runtime.paths.checkpoint).last_committed_batch or -1) >= 6, what="more batches"
    )
    # Verified before the pause where the catch-up outruns the stream: on a 3 s trigger it does (a replayed batch
    # costs a query start, about a second, plus the batch); the policy would judge that from 20 batches of history.
    runtime.restart({"trigger_interval_s": 3.0})
    settled = checkpoint_facts(runtime.paths.checkpoint).last_committed_batch
    wait_until(
        lambda: checkpoint_facts(runtime.paths.checkpoint).last_committed_batch >= settled + 2,
        timeout_s=60,
        what="two batches on the 3 s trigger",
    )
    with monkeypatch.context() as patched:
        patched.setattr(precopy_module, "replay_keeps_pace", lambda prepared, history: True)
        # On a loaded machine the rounds fall behind (measured under CI: 4 batches at the pause, over the limit of 3,
        # so the native fallback ran): the limit is lifted here, so the precopy path is what this part checks.
        patched.setattr(migration, "PRECOPY_MAX_PAUSE_BATCHES", 50)
        patched.setattr(migration, "PRECOPY_MAX_MERGED_PAUSE_BATCHES", 50)
        result = reconfigurer.run(plan_with(runtime, state_partitions=6))
    assert result.outcome == "succeeded", result.results
    prepared, paused, migrated = (
        result.results["prepare"]["precopy"],
        result.results["pause"],
        result.results["migrate"],
    )
    assert "failed" not in prepared and prepared["generation"] == 3 and prepared["copied_files"] > 0
    assert prepared["from_batch"] >= 6  # copied as of a batch the live stream had committed, not from the start
    assert "fell_back" not in migrated and migrated["strategy"] == "precopy", (migrated.get("fell_back"), prepared)
    # The pause replayed only what the live stream committed after the last round before it, not its history.
    assert (
        migrated["replayed_batches"]
        == paused["batch_id"] - prepared["caught_up_to"]
        <= paused["batch_id"] - prepared["from_batch"]
    )
    assert migrated["batch_id"] == paused["batch_id"] + 1  # the copy's repartition batch shifts its ids by one
    verification = result.verification
    assert verification.ok, verification
    assert all(s["rows_before"] == s["rows_after"] and s["max_partition_id"] < 6 for s in verification.stores)
    # The whole state was compared before the pause; the pause checked only the batches it replayed, unless it replayed
    # several as one and no merged replay of this copy had been compared with the whole state (on a loaded machine
    # batches pile up before the pause): then the pause compares the whole state again.
    assert prepared["verified"]["ok"]
    delta = [
        run
        for run in prepared["replays"] + migrated["replays"]
        if run["batch_id"] - 1 > prepared["verified"]["live_batch"]
    ]
    replayed = sum(len(run.get("merged") or [run["batch_id"] - 1]) for run in migrated["replays"])
    assert replayed == migrated["replayed_batches"]
    if any(len(run.get("merged") or []) > 1 for run in delta) and not prepared["verified"]["merged_runs"]:
        assert verification.copy_verified_at is None and verification.delta_batches is None, verification
    else:
        assert verification.copy_verified_at == prepared["verified"]["live_batch"], verification
        assert verification.delta_batches == len(delta) >= len(migrated["replays"])
    assert all(run["state"] and run["state"][0]["numRowsTotal"] > 0 for run in migrated["replays"])
    assert runtime.paths.generation == 3 and checkpoint_facts(runtime.paths.checkpoint).state_partitions == 6
    assert not runtime.paths.checkpoint_of(2).exists(), "the live checkpoint the copy came from is removed at the end"

    # Where the catch-up does not outrun the stream, the pause compares the whole state, as after a native migration.
    monkeypatch.setattr(precopy_module, "replay_keeps_pace", lambda prepared, history: False)
    again = reconfigurer.run(plan_with(runtime, state_partitions=4))
    assert again.outcome == "succeeded", again.results
    assert again.results["prepare"]["precopy"]["verified"] is None and again.migrated.fell_back is None
    verification = again.verification
    assert verification.ok and verification.copy_verified_at is None, verification
    assert verification.before_batch == again.results["pause"]["batch_id"] and runtime.paths.generation == 4
    assert_output_matches_oracle(spark, runtime)


def test_bad_plans_are_refused_and_change_nothing(spark, tmp_path):
    runtime = start_stream(spark, tmp_path, "wordcount")
    ledger = AuditLedger(default_ledger_url(tmp_path))
    reconfigurer = Reconfigurer(LocalStream(runtime), ledger, observe_timeout_s=10)
    before = checkpoint_facts(runtime.paths.checkpoint).state_partitions

    with pytest.raises(SpecError, match=r"state partitions must be between 1 and 10000, got 0"):
        ExecutionPlan.parse(plan_with(runtime, state_partitions=0))
    with pytest.raises(ReconfigurationRefused, match=r"invalid execution plan: partitioning.state_partitions"):
        reconfigurer.run(plan_with(runtime, state_partitions=0))
    with pytest.raises(ReconfigurationRefused, match=r"plan is for stream 'elsewhere', not 'rc-wordcount'"):
        reconfigurer.run({**plan_with(runtime, state_partitions=8), "stream": "elsewhere"})
    with pytest.raises(
        ReconfigurationRefused,
        match=r"names unknown stateful operator\(s\) \['7'\]; the checkpoint has 0 \(stateStoreSave\)",
    ):
        reconfigurer.run(plan_with(runtime, state_partitions={"0": 8, "7": 8}))
    with pytest.raises(ReconfigurationRefused, match=r"Spark repartitions every stateful operator of a query together"):
        reconfigurer.run(plan_with(runtime, state_partitions={"0": 8, "1": 6}))
    incompatible = ExecutionPlan.of(runtime.spec).model_dump()
    incompatible["logic"]["code_version"] = "3"
    with pytest.raises(
        ReconfigurationRefused, match=r"code version '3' cannot read the checkpoint's state: .*value schema"
    ):
        reconfigurer.run(incompatible)
    with pytest.raises(ReconfigurationRefused, match=r"has no code version '9'; versions: 1, 2, 3"):
        reconfigurer.run({**incompatible, "logic": {"code_version": "9"}})

    assert runtime.is_active, "a refused plan must leave the stream running"
    assert checkpoint_facts(runtime.paths.checkpoint).state_partitions == before
    assert ledger.lock(runtime.spec.name) is None
    refusals = ledger.records(stream=runtime.spec.name, kinds=["reconfiguration.refused", "reconfiguration.finished"])
    assert len(refusals) == 6 and ledger.verify().ok  # every refusal is on the record

    compatible = ExecutionPlan.of(runtime.spec).model_dump()
    compatible["logic"]["code_version"] = "2"
    result = reconfigurer.run(compatible)
    assert result.outcome == "succeeded" and runtime.spec.code_version == "2"
    assert result.results["preflight"]["checks"]["code_version"]["compatible"]
    assert_output_matches_oracle(spark, runtime)


def test_native_migration_refuses_hdfs_backed_state(spark, tmp_path):
    key = "spark.sql.streaming.stateStore.providerClass"
    previous = spark.conf.get(key)
    spark.conf.set(key, HDFS_PROVIDER)
    try:
        runtime = start_stream(spark, tmp_path, "wordcount")
    finally:
        spark.conf.set(key, previous)
    ledger = AuditLedger(default_ledger_url(tmp_path))
    with pytest.raises(
        ReconfigurationRefused, match=r"HDFSBackedStateStoreProvider; the native migration supports RocksDB"
    ):
        Reconfigurer(LocalStream(runtime), ledger).run(plan_with(runtime, state_partitions=8))
    assert runtime.is_active and checkpoint_facts(runtime.paths.checkpoint).state_partitions == 4
    result = Reconfigurer(LocalStream(runtime), ledger, strategy="replay", observe_timeout_s=10).run(
        plan_with(runtime, state_partitions=8)
    )
    assert result.outcome == "succeeded", "the replay strategy works for any state store"
    assert_output_matches_oracle(spark, runtime)


class WrongPartitionsStream(LocalStream):
    """A faulty migration: the real repartition, but to one partition fewer than asked."""

    def migrate(self, state_partitions: int, strategy: str) -> dict:
        return super().migrate(state_partitions - 1, strategy)


def test_failed_verification_rolls_back_to_the_paused_batch(spark, tmp_path):
    runtime = start_stream(spark, tmp_path, "wordcount")
    ledger = AuditLedger(default_ledger_url(tmp_path))
    result = Reconfigurer(WrongPartitionsStream(runtime), ledger).run(plan_with(runtime, state_partitions=8))
    assert result.outcome == "rolled_back"
    verification = result.verification
    assert not verification.ok
    assert "checkpoint records 7 state partitions, the plan 8" in verification.problems
    assert verification.rolled_back["deleted"] > 0
    facts = checkpoint_facts(runtime.paths.checkpoint)
    assert facts.state_partitions == 4 and facts.committed
    assert runtime.is_active and runtime.spec.state_partitions == 4, "the stream resumes exactly as before"
    assert ledger.lock(runtime.spec.name) is None
    assert_output_matches_oracle(spark, runtime)


class UnreadableStateStream(LocalStream):
    """A state its reader cannot read (as an operator it does not know): prepare fails, before any pause."""

    def state(self, generation=None, batch_id=None) -> dict:
        raise StreamStateError("[STDS_REQUIRED_OPTION_UNSPECIFIED] 'stateVarName' must be specified.\n\tat org...")


def test_a_step_failed_before_the_pause_changes_nothing_and_frees_the_stream(spark, tmp_path):
    runtime = start_stream(spark, tmp_path, "wordcount")
    ledger = AuditLedger(default_ledger_url(tmp_path))
    run_id = str(runtime.query.runId)
    failed = Reconfigurer(UnreadableStateStream(runtime), ledger).run(plan_with(runtime, state_partitions=8))
    assert failed.outcome == "failed_before_pause" and "prepare" not in failed.results
    assert failed.explanation() == [
        "failed_before_pause: prepare: [STDS_REQUIRED_OPTION_UNSPECIFIED] 'stateVarName' must be specified."
    ]
    assert ledger.lock(runtime.spec.name) is None, "nothing to finish: the stream is free"
    assert runtime.is_active and str(runtime.query.runId) == run_id, "never stopped"
    assert checkpoint_facts(runtime.paths.checkpoint).state_partitions == 4
    (finished,) = ledger.records(reconfiguration_id=failed.id, kinds=["reconfiguration.finished"])
    assert finished.payload["outcome"] == "failed_before_pause"
    nxt = Reconfigurer(LocalStream(runtime), ledger, observe_timeout_s=10).run(plan_with(runtime, state_partitions=6))
    assert nxt.outcome == "succeeded", "the next plan is accepted"
    assert_output_matches_oracle(spark, runtime)


def test_one_reconfiguration_per_stream_and_same_plan_is_a_noop(spark, tmp_path):
    runtime = start_stream(spark, tmp_path, "q5")
    ledger = AuditLedger(default_ledger_url(tmp_path))
    reconfigurer = Reconfigurer(LocalStream(runtime), ledger, observe_timeout_s=10)
    first = reconfigurer.begin(plan_with(runtime, state_partitions=8))
    with pytest.raises(
        ReconfigurationRefused, match=rf"is being reconfigured by {first.id} .*re-run that plan to finish it"
    ):
        reconfigurer.begin(plan_with(runtime, state_partitions=6))
    again = reconfigurer.run(plan_with(runtime, state_partitions=8))  # a re-run of the same plan continues it
    assert again.id == first.id and again.outcome == "succeeded"
    noop = reconfigurer.run(plan_with(runtime, state_partitions=8))
    assert noop.outcome == "noop" and noop.id != first.id
    runtime.stop_at_batch_boundary()
