"""The production policy's guards, DS2 decisions, the baselines, and the evidence window."""

import dataclasses

import pandas as pd
import pytest

from dagster_reconf.core.errors import SpecError
from dagster_reconf.core.progress.lifecycle import Paused, QueryStarted, QueryTerminated, Restarted, Started
from dagster_reconf.core.scaling.baselines import DhalionPolicy, DynamicAllocationPolicy
from dagster_reconf.core.scaling.ds2_policy import DS2Policy
from dagster_reconf.core.scaling.evidence import ConfigurationWindow, decide, describe_epoch
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.core.scaling.scaling_plan import Knobs, ScalingPlan, ScalingStep
from dagster_reconf.core.scaling.signal import Signal, observe
from dagster_reconf.core.scaling.skew import skewed_operators
from dagster_reconf.core.spec import StreamSpec

from .test_model import profile

KNOBS = Knobs(cores=1, source_partitions=1, state_partitions=8, trigger_interval_s=1.0)


def obs(**changes) -> Signal:
    base = dict(
        batches=8,
        config_age_s=120.0,
        source_rate=1000.0,
        processed_rate=600.0,
        backlog=20_000.0,
        backlog_growth=400.0,
        utilization=1.6,
        batch_ms=1600.0,
    )
    return Signal(**{**base, **changes})


def test_guards_hold_with_a_reason():
    policy = DS2Policy(PolicyConfig(stabilization_s=30, window_batches=6))
    stabilizing = policy.decide("s", KNOBS, obs(config_age_s=10), profile())
    not_full = policy.decide("s", KNOBS, obs(batches=3), profile())
    untraced = policy.decide("s", KNOBS, obs(), None)
    assert "stabilizing" in stabilizing.reason and "window not full: 3 of 6" in not_full.reason
    assert "no traces cover the window" in untraced.reason
    healthy = policy.decide(
        "s", KNOBS, obs(processed_rate=1000, backlog=100, backlog_growth=0, utilization=0.6), profile()
    )
    assert healthy.action == "hold" and "in band" in healthy.reason and not healthy.requests_run
    # Only a hold on a judged window says the stream is settled (the closed loop's convergence counts on it).
    assert [d.judged for d in (stabilizing, not_full, untraced, healthy)] == [False, False, False, True]


def test_ds2_scales_up_in_one_step_with_a_plan_and_report():
    decision = DS2Policy().decide("s", KNOBS, obs(), profile(), epoch="started@1", restart_s=2.0)
    assert decision.action == "scale_up" and decision.requests_run
    plan = decision.plan
    # 1000 events/s + (20000 backlog - 1000 in flight (one 1 s interval's arrivals, which the next batch takes anyway)
    # + 1000 * (2 s restart + 10 s stabilization)) / 60 s -> 3 cores (8 state partitions in 3 waves:
    # 1000 * (1/3 + 0.5 * 3/8) = 521 ms of the 600 at 70 %)
    assert plan.target.cores == 3 and plan.target.source_partitions == 3
    assert plan.predicted["target_rate"] == pytest.approx(1000 + (20_000 - 1000 + 1000 * 12) / 60)
    assert [row.operator for row in plan.report] == ["j0.d1:Exchange+MicroBatchScan#a", "j0.d0:agg#b"]
    assert plan.predicted["observed_backlog"] == 20_000 and "DS2" in plan.reason
    again = DS2Policy().decide("s", KNOBS, obs(backlog=25_000), profile(), epoch="started@1", restart_s=2.0)
    assert again.plan.plan_hash == plan.plan_hash  # same move from the same configuration: one run_key
    later = DS2Policy().decide("s", KNOBS, obs(), profile(), epoch="restarted@9", restart_s=2.0)
    assert later.plan.plan_hash != plan.plan_hash


def test_direction_only_reads_no_profile_and_keeps_the_guards():
    def no_traces():
        raise AssertionError("a direction-only decision must not read traces")

    policy = DS2Policy(PolicyConfig(stabilization_s=30, window_batches=6))
    wanted = policy.decide("s", KNOBS, obs(), no_traces, plan=False)
    assert wanted.action == "scale_up" and wanted.plan is None and not wanted.requests_run
    assert wanted.reason.startswith("scale up wanted: utilization 1.60, backlog 20,000 events (+400/s)")
    assert "stabilizing" in policy.decide("s", KNOBS, obs(config_age_s=10), no_traces, plan=False).reason
    big = KNOBS.model_copy(update={"cores": 8, "source_partitions": 8})
    idle = policy.decide(
        "s",
        big,
        obs(processed_rate=100, source_rate=100, backlog=0, backlog_growth=0, utilization=0.2),
        no_traces,
        plan=False,
    )
    assert idle.action == "scale_down" and idle.plan is None


def test_scale_down_waits_then_moves_to_what_the_model_needs():
    policy = DS2Policy(PolicyConfig(scale_down_delay_s=60))
    big = KNOBS.model_copy(update={"cores": 8, "source_partitions": 8})
    idle = dict(processed_rate=100, source_rate=100, backlog=0, backlog_growth=0, utilization=0.2)
    assert "scale-down waits 60 s" in policy.decide("s", big, obs(config_age_s=30, **idle), profile(cores=8)).reason
    decision = policy.decide("s", big, obs(**idle), profile(cores=8))
    assert decision.action == "scale_down" and decision.plan.target.cores < 8


def test_every_decision_says_its_step_and_what_it_saves_or_costs():
    up = DS2Policy().decide("s", KNOBS, obs(), profile(), restart_s=2.0).step
    assert (up.kind, up.cores_before, up.cores_after, up.core_seconds_per_hour_saved) == ("scale_up", 1, 3, -2 * 3600)
    assert up.describe() == "scale_up: 1 -> 3 cores, costs 7,200 core-s/h"
    big = KNOBS.model_copy(update={"cores": 8, "source_partitions": 8})
    idle = dict(processed_rate=100, source_rate=100, backlog=0, backlog_growth=0, utilization=0.2)
    down = DS2Policy(PolicyConfig(scale_down_delay_s=0)).decide("s", big, obs(**idle), profile(cores=8)).step
    assert down.kind == "scale_down" and down.core_seconds_per_hour_saved == (8 - down.cores_after) * 3600 > 0
    held = DS2Policy(PolicyConfig(stabilization_s=30)).decide("s", big, obs(config_age_s=10), profile()).step
    assert held.as_dict() == {
        "kind": "hold",
        "cores_before": 8,
        "cores_after": 8,
        "core_seconds_per_hour_before": 28_800,
        "core_seconds_per_hour_after": 28_800,
        "core_seconds_per_hour_saved": 0,
    }
    longer = KNOBS.model_copy(update={"trigger_interval_s": 4.0})
    assert ScalingStep.between(KNOBS, longer).kind == "interval_change"
    assert ScalingStep.between(KNOBS, KNOBS.model_copy(update={"state_partitions": 16})).kind == "repartition"
    assert ScalingStep.between(KNOBS, longer).describe() == "interval_change: 1 -> 1 cores, same cores"


def test_fixed_costs_hide_over_provisioning_from_utilization_but_not_from_ds2():
    # 12 cores, 200 events/s of 1.5 ms each: 0.3 core-seconds a second, yet fixed costs keep batches at 0.5 of the
    # interval (above utilization_low). DS2 plans down in one step; the baselines, with no model, hold in band.
    twelve = Knobs(cores=12, source_partitions=12, state_partitions=12, trigger_interval_s=1.0)
    busy_looking = obs(source_rate=200, processed_rate=200, backlog=50, backlog_growth=0, utilization=0.5)
    policy = DS2Policy(PolicyConfig(scale_down_delay_s=60))
    waiting = policy.decide(
        "s", twelve, dataclasses.replace(busy_looking, config_age_s=30), profile(cores=12, state_partitions=12)
    )
    assert waiting.action == "hold" and waiting.reason.startswith(
        "in band (utilization 0.50), but perhaps over-provisioned: the model-checked scale-down waits 60 s"
    )
    down = policy.decide("s", twelve, busy_looking, profile(cores=12, state_partitions=12))
    assert down.action == "scale_down" and down.requests_run and down.plan.target.cores <= 2
    assert down.step.core_seconds_per_hour_saved >= 10 * 3600
    assert DhalionPolicy().decide("s", twelve, busy_looking, profile(cores=12, state_partitions=12)).action == "hold"
    light = policy.decide("s", twelve, busy_looking, None, plan=False)  # no model without traces: in band
    assert light.action == "hold" and light.reason.startswith("in band")
    # Where the model puts the steady state above the plans' floor (the middle of low and target, 52.5 %), the stream
    # is in band: a plan DS2 made is never undone. 5 cores use (100 + 1450 * (1 / 5 + 0.5 / 4)) / 1000 = 57 % at 1450
    # events/s (the 8 state partitions in 2 waves, as on 4 cores).
    five = twelve.model_copy(update={"cores": 5, "source_partitions": 5, "state_partitions": 8})
    near = policy.decide(
        "s",
        five,
        obs(source_rate=1450, processed_rate=1450, backlog=50, backlog_growth=0, utilization=0.6),
        profile(cores=5, state_partitions=8),
    )
    assert near.action == "hold" and near.reason.startswith("in band: utilization 0.60")
    assert "(57%; 4 cores: 64%; no fewer within 5% of it): not over-provisioned" in near.reason  # every core counts
    slower = policy.decide(
        "s",
        five,
        obs(source_rate=1000, processed_rate=1000, backlog=50, backlog_growth=0, utilization=0.45),
        profile(cores=5, state_partitions=8),
    )
    assert slower.action == "scale_down" and slower.plan.target.cores < 5  # 5 cores would use 40 %


def test_cores_that_buy_nothing_are_given_back_even_in_band():
    # 12 Python tasks on 2 CPUs each pay a 200 ms set-up, queued for the CPUs: at 12 cores the fixed costs alone take
    # most of the interval, so the stream looks busy (the model: 76 %) at any count above the plans' floor. DS2's plan
    # for fewer cores runs the same rate no slower (the model against itself, its bias cancelled): down it goes.
    twelve = profile(
        cores=12,
        state_partitions=2,
        tasks=(12, 2),
        cpus=2,
        work=(4.0, 0.2),
        cpu=(0.2, 0.1),
        task_cpu=(200.0, 0.0),
        overhead=(10.0, 10.0),
        coordination=200,
        trigger=2.0,
    )
    steady = obs(source_rate=250, processed_rate=250, backlog=0, backlog_growth=0, utilization=0.65)
    down = DS2Policy(PolicyConfig(scale_down_delay_s=0)).decide("s", twelve.knobs, steady, twelve)
    assert down.action == "scale_down" and down.plan.target.cores < 12
    assert "12 cores buy nothing (the model: 76% of the interval; 2 cores:" in down.reason
    # Measured above the target utilization (in band by the signal alone), the model is asked all the same.
    busy = DS2Policy(PolicyConfig(scale_down_delay_s=0)).decide(
        "s", twelve.knobs, dataclasses.replace(steady, utilization=0.78), twelve
    )
    assert busy.action == "scale_down" and busy.plan.target == down.plan.target
    assert (
        DS2Policy().decide("s", twelve.knobs, dataclasses.replace(steady, utilization=0.95), twelve).action
        == "scale_up"
    )
    # With 150 ms set-ups the plan's 2 cores would run hotter (67 %) than the 12 (61 %), but 3 run it at 54 % (6 at 39
    # %):
    # past them each core only adds a queued set-up, so the 12 buy nothing either, and down they go to DS2's plan.
    cheap = profile(
        cores=12,
        state_partitions=2,
        tasks=(12, 2),
        cpus=2,
        work=(4.0, 0.2),
        cpu=(0.2, 0.1),
        task_cpu=(150.0, 0.0),
        overhead=(10.0, 10.0),
        coordination=200,
        trigger=2.0,
    )
    fewer = DS2Policy(PolicyConfig(scale_down_delay_s=0)).decide("s", cheap.knobs, steady, cheap)
    assert fewer.action == "scale_down" and fewer.plan.target.cores == 2
    assert "12 cores buy nothing (the model: 61% of the interval; 3 cores: 54%)" in fewer.reason


def test_skewed_operator_is_flagged_not_scaled():
    decision = DS2Policy().decide("s", KNOBS, obs(), profile(skew=(1.0, 6.0), work=(0.2, 1.0)))
    assert decision.action == "skew" and decision.plan is None and "hot partition" in decision.reason


def test_recommend_only_keeps_the_plan_but_requests_no_run():
    decision = DS2Policy(PolicyConfig(recommend_only=True)).decide("s", KNOBS, obs(), profile())
    assert decision.plan is not None and not decision.requests_run


def test_baselines_move_by_fixed_steps():
    four = KNOBS.model_copy(update={"cores": 4, "source_partitions": 4})
    assert DhalionPolicy().decide("s", four, obs(), profile()).plan.target.cores == 5
    assert DynamicAllocationPolicy().decide("s", four, obs(), profile()).plan.target.cores == 8
    assert DynamicAllocationPolicy(PolicyConfig(max_cores=6)).decide("s", four, obs(), None).plan.target.cores == 6


def test_policy_config_and_plan_errors_name_the_field():
    with pytest.raises(SpecError, match=r"utilization_target: .*got 1.5"):
        PolicyConfig.parse({"utilization_target": 1.5})
    with pytest.raises(SpecError, match="utilization_low < utilization_target"):
        PolicyConfig.parse({"utilization_low": 0.8})
    with pytest.raises(SpecError, match=r"target.cores: .*got 0"):
        ScalingPlan.parse(
            {
                "stream": "s",
                "policy": "ds2",
                "reason": "r",
                "current": KNOBS.model_dump(),
                "target": {**KNOBS.model_dump(), "cores": 0},
            }
        )
    with pytest.raises(SpecError, match="must change at least one knob"):
        ScalingPlan.parse(
            {"stream": "s", "policy": "ds2", "reason": "r", "current": KNOBS.model_dump(), "target": KNOBS.model_dump()}
        )


def progress(batch, t, events, latest, duration=900):
    return {
        "kind": "progress",
        "progress": {
            "batchId": batch,
            "timestamp": pd.Timestamp(t, unit="s", tz="UTC").isoformat(),
            "numInputRows": events,
            "durationMs": {"triggerExecution": duration},
            "sources": [
                {
                    "startOffset": {"index": batch * events},
                    "endOffset": {"index": (batch + 1) * events},
                    "latestOffset": {"index": latest},
                }
            ],
        },
    }


def test_window_follows_restarts_and_observes_rates():
    spec = {
        "name": "s",
        "entrypoint": "my_pkg.streams:orders",
        "master": "local[1]",
        "state_partitions": 8,
        "source_partitions": 1,
    }
    records = [Started(stream="s", spec=spec, recorded_at=0.0).to_record()]
    records += [progress(b, b, 500, 1000 * (b + 1), duration=1400) for b in range(10)]
    records += [
        {**progress(b, b, 500, 1000 * (b + 1), duration=1400), "python_cpu_samples": [[b * 1000.0, b * 10.0]]}
        for b in range(10, 30)
    ]
    window = ConfigurationWindow().update(records, keep=20)
    # the newest rows keep the Python CPU samples the profile splits per task and per event; older ones drop them
    assert [bool(r["python_cpu_samples"]) for r in window.rows] == [False] * 8 + [True] * 12
    records = records[:11]
    window = ConfigurationWindow().update(records)
    o = observe(window.frame(), 1.0, 100.0, warmup_batches=2)
    assert o.source_rate == pytest.approx(1000) and o.processed_rate == pytest.approx(500)
    assert o.backlog_growth == pytest.approx(500) and o.utilization == pytest.approx(1.4)

    restarted = Restarted(
        stream="s", spec={**spec, "master": "local[4]"}, scope="session", seconds=2.5, recorded_at=50.0
    ).to_record()
    paused = Paused(stream="s", reconfiguration_id="rc-1", lead_s=41.5, recorded_at=49.0).to_record()
    assert ConfigurationWindow().lead_s is None
    window = ConfigurationWindow.from_json(window.to_json()).update([paused, restarted])
    assert (
        window.rows == [] and window.epoch == "restarted@50.000" and window.restart_s == 2.5 and window.lead_s == 41.5
    )
    # the configuration before is kept (a second operating point separates CPU per task from CPU per event)
    assert window.previous["spec"]["master"] == "local[1]" and len(window.previous["rows"]) == 10
    assert ConfigurationWindow.from_json(window.to_json()).previous == window.previous
    held = decide(DS2Policy(), window, now=52.0)
    assert held.action == "hold" and "stabilizing" in held.reason


def test_batches_until_the_python_workers_stop_growing_in_number_are_not_evidence():
    # a new SparkContext forks its Python workers over its first batches; their first tasks are stragglers
    spec = {
        "name": "s",
        "entrypoint": "my_pkg.streams:orders",
        "master": "local[12]",
        "state_partitions": 2,
        "source_partitions": 12,
    }
    counts = [10, 16, 20, 20, 24, 24, 24, 24, 23, 24]  # one worker went and came back: not a warm-up
    records = [Started(stream="s", spec=spec, recorded_at=0.0).to_record()]
    records += [{**progress(b, 2 * b, 500, 1000 * (b + 1)), "python_workers": n} for b, n in enumerate(counts)]
    window = ConfigurationWindow().update(records)
    assert window.settled(stabilization_s=3).batch_id.tolist() == [5, 6, 7, 8, 9]  # after the last new high
    assert window.settled(stabilization_s=17).batch_id.tolist() == [9]  # time still counts
    warming = ConfigurationWindow().update(records[:6])
    assert warming.settled(stabilization_s=3).batch_id.tolist() == []  # its newest batch forked workers
    plain = ConfigurationWindow().update(records[:1] + [progress(b, 2 * b, 500, 1000 * (b + 1)) for b in range(10)])
    assert plain.settled(stabilization_s=3).batch_id.tolist() == list(
        range(2, 10)
    )  # not recorded (a cluster): time only


def test_a_load_step_inside_the_window_is_read_at_its_new_rate():
    # 1000 events/s offered for batches 0-5, then 2000/s: the newest batches show the new rate
    spec = {
        "name": "s",
        "entrypoint": "my_pkg.streams:orders",
        "master": "local[1]",
        "state_partitions": 8,
        "source_partitions": 1,
    }
    offered = [1000 * (b + 1) if b < 6 else 6000 + 2000 * (b - 5) for b in range(10)]
    records = [Started(stream="s", spec=spec, recorded_at=0.0).to_record()]
    records += [progress(b, b, 500, offered[b], duration=1400) for b in range(10)]
    o = observe(ConfigurationWindow().update(records).frame(), 1.0, 100.0, warmup_batches=2)
    assert o.source_rate == pytest.approx(2000)  # the whole window's average would say 1571


def test_the_peak_rate_of_the_scale_down_delay_is_read_beside_the_recent_rate():
    # 2000 events/s offered for batches 0-7, then 1000/s: the recent rate is the new one, the peak the old one
    spec = {
        "name": "s",
        "entrypoint": "my_pkg.streams:orders",
        "master": "local[1]",
        "state_partitions": 8,
        "source_partitions": 1,
    }
    offered = [2000 * (b + 1) if b < 8 else 16_000 + 1000 * (b - 7) for b in range(14)]
    records = [Started(stream="s", spec=spec, recorded_at=0.0).to_record()]
    records += [progress(b, b, 500, offered[b], duration=400) for b in range(14)]
    frame = ConfigurationWindow().update(records).frame()
    o = observe(frame, 1.0, 100.0, warmup_batches=2, peak_span_s=30)
    assert o.source_rate == pytest.approx(1000) and o.peak_rate == pytest.approx(2000)
    # spans ending within the newest one at least (3 s), without a delay too: a step inside the newest span shows
    assert observe(frame, 1.0, 100.0, warmup_batches=2, peak_span_s=0).peak_rate == pytest.approx(1000)  # all after it
    inside = observe(ConfigurationWindow().update(records[:11]).frame(), 1.0, 100.0, warmup_batches=2, peak_span_s=0)
    assert inside.source_rate == pytest.approx(4000 / 3) and inside.peak_rate == pytest.approx(2000)
    assert inside.peak_span_s == pytest.approx(3) and o.peak_span_s == 30
    steady = [progress(b, b, 500, 1000 * (b + 1), duration=400) for b in range(14)]
    assert observe(
        ConfigurationWindow().update(records[:1] + steady).frame(), 1.0, 100.0, peak_span_s=30
    ).peak_rate == (pytest.approx(1000))


def test_a_scale_down_waits_while_the_offered_rate_is_still_falling():
    # Planned at a rate between the old and the new one, a scale-down would land between the two plans (and need a
    # second step): it waits until the highest rate of the scale-down delay needs no more cores than the recent one.
    policy = DS2Policy(PolicyConfig(scale_down_delay_s=30))
    big = KNOBS.model_copy(update={"cores": 8, "source_partitions": 8})
    idle = obs(processed_rate=100, source_rate=100, backlog=0, backlog_growth=0, utilization=0.2)
    falling = policy.decide("s", big, dataclasses.replace(idle, peak_rate=1000, peak_span_s=30), profile(cores=8))
    assert falling.action == "hold" and not falling.requests_run
    assert falling.reason.startswith(
        "fewer cores wanted, but the offered rate moved within the last 30 s: "
        "1,000 events/s at its highest, 100 now; DS2 needs "
    )
    down = policy.decide("s", big, idle, profile(cores=8))
    assert down.action == "scale_down" and down.plan.target.cores < 8
    # a peak that needs no more cores than the recent rate is no reason to wait
    same = policy.decide("s", big, dataclasses.replace(idle, peak_rate=101), profile(cores=8))
    assert same.action == "scale_down" and same.plan.target == down.plan.target


def test_a_terminated_query_is_said_not_decided_on_until_it_starts_again():
    spec = {"name": "s", "entrypoint": None, "master": "local[1]", "state_partitions": 8, "source_partitions": 1}
    started = Started(stream="s", spec=spec, recorded_at=0.0).to_record()
    behind = [progress(b, b, 500, 1000 * (b + 1), duration=1400) for b in range(10)]
    stopped = ConfigurationWindow().update([started, *behind, QueryTerminated(stream="s").to_record()])
    held = decide(DS2Policy(PolicyConfig(stabilization_s=0)), stopped, now=100.0, plan=False)
    assert held.action == "hold" and held.reason.startswith("its query ended")
    again = ConfigurationWindow.from_json(stopped.to_json()).update(
        [{**started, "recorded_at": 200.0}, *[progress(b, 200 + b, 500, 1000 * (b + 1), 1400) for b in range(10)]]
    )
    assert decide(DS2Policy(PolicyConfig(stabilization_s=0)), again, now=300.0, plan=False).action == "scale_up"
    # A restart's new run recorded before the old run's late end: the query runs, the policy decides.
    restarted = ConfigurationWindow.from_json(again.to_json()).update(
        [QueryStarted(stream="s", run_id="r2").to_record(), QueryTerminated(stream="s", run_id="r1").to_record()]
    )
    assert not restarted.terminated and restarted.run_id == "r2"


def test_what_one_interval_leaves_behind_is_no_backlog_to_catch_up():
    policy = DS2Policy(PolicyConfig(scale_down_delay_s=3600))
    held = policy.decide("s", KNOBS, obs(backlog=1, backlog_growth=-0.1, utilization=0.6), profile())
    assert held.action == "hold" and held.reason.startswith("in band"), held.reason


def test_high_utilization_while_the_backlog_clears_in_time_is_catching_up_not_scaling():
    policy = DS2Policy(PolicyConfig(catch_up_s=60))
    clearing = policy.decide("s", KNOBS, obs(backlog=10_000, backlog_growth=-500, utilization=1.0), profile())
    assert clearing.action == "hold" and "catching up" in clearing.reason and "clear in 20 s" in clearing.reason
    too_slow = policy.decide("s", KNOBS, obs(backlog=100_000, backlog_growth=-100, utilization=1.0), profile())
    assert too_slow.action == "scale_up"  # 1000 s to clear > 60 s, and 3 cores clear it in 168 s
    # Slow, but 8 cores are more than the steady state needs (3): more would idle once caught up.
    eight = KNOBS.model_copy(update={"cores": 8, "source_partitions": 8})
    steady = policy.decide("s", eight, obs(backlog=100_000, backlog_growth=-500, utilization=1.0), profile(cores=8))
    assert steady.action == "hold" and "needs 3 cores for the steady state" in steady.reason


def test_cluster_cores_held_in_executors_round_up_and_raise_the_ceiling_when_needed():
    spec = StreamSpec(
        name="s1",
        entrypoint="my_pkg.streams:orders",
        master="spark://10.0.0.5:7077",
        executor_cores=2,
        max_cores=2,
        cores_ceiling=8,
        state_partitions=8,
    )
    assert Knobs.of(spec).cores == 2
    assert KNOBS.model_copy(update={"cores": 5}).changes_for(spec)["max_cores"] == 6  # three executors of 2
    assert "cores_ceiling" not in KNOBS.model_copy(update={"cores": 8}).changes_for(spec)
    raised = KNOBS.model_copy(update={"cores": 9}).changes_for(spec)
    assert (raised["max_cores"], raised["cores_ceiling"]) == (10, 10)
    plain = spec.model_copy(update={"cores_ceiling": None})
    assert KNOBS.model_copy(update={"cores": 5}).changes_for(plain)["max_cores"] == 5


def test_a_slow_catch_up_at_the_cores_the_model_would_keep_is_held_not_stepped_again():
    # The plan cut the catch-up back to the cores the steady state needs (more would idle once caught up): the
    # slower catch-up that follows is the plan's own choice, not a reason for another step.
    policy = DS2Policy(PolicyConfig(catch_up_s=60))
    four = KNOBS.model_copy(update={"cores": 4, "source_partitions": 4})
    slow = policy.decide("s", four, obs(backlog=100_000, backlog_growth=-500, utilization=1.0), profile(cores=4))
    assert (
        slow.action == "hold" and "catching up" in slow.reason and "needs 3 cores for the steady state" in slow.reason
    )
    # A plan that keeps the cores but moves another knob (here the trigger interval): held too, no pause for it.
    longer = policy.decide(
        "s",
        four.model_copy(update={"trigger_interval_s": 0.5}),
        obs(backlog=100_000, backlog_growth=-500, utilization=1.0),
        profile(cores=4),
    )
    assert longer.action == "hold" and "catching up" in longer.reason


def test_a_backlog_that_shrinks_is_not_paused_for_a_catch_up_that_would_not_come_much_sooner():
    # 1,300 events/s offered, three cores clearing 800/s more: 60,000 in 75 s, over catch_up_s. DS2 plans 4 (3 would
    # take 100 + 1300 * (1/3 + 0.5 * 3/8) = 777 ms of the 700; 4: 2,400 events/s, clearing 1,100/s), but the pause
    # (3 s restart + 10 s stabilization) lets the backlog grow to 76,900, of which the next batch takes 1,300 anyway:
    # 82 s, not sooner at all.
    policy = DS2Policy(PolicyConfig(catch_up_s=60))
    three = KNOBS.model_copy(update={"cores": 3, "source_partitions": 3})

    def at(growth: float, lead_s: float = 0.0):
        offered = obs(source_rate=1300, backlog=60_000, backlog_growth=growth, utilization=1.0)
        return policy.decide("s", three, offered, profile(cores=3), lead_s=lead_s)

    near = at(-800)
    assert near.action == "hold" and near.plan is None, near.reason
    assert "clear in 75 s" in near.reason and "in 82 s, counting 0 s until the pause and 13 s" in near.reason
    assert "4 cores" in near.reason
    # Clearing a fifth as fast, the same plan clears it in 82 s instead of 375 s: worth the pause.
    slow = at(-160)
    assert slow.action == "scale_up" and slow.plan.target.cores == 4, slow.reason
    # Unless a reconfiguration takes 250 s to reach its pause (a standby's start): 20,000 are left by then, and 4 cores
    # clear them (and the 16,900 of the restart, less the 1,300 in flight) 32 s after it: 295 s against 375 s is under
    # a quarter sooner.
    late = at(-160, lead_s=250)
    assert late.action == "hold" and "in 295 s, counting 250 s until the pause" in late.reason, late.reason
    # A backlog growing until the pause is planned for as it will be then: 30 s at +400/s adds 12,000 to catch up.
    soon, later = (DS2Policy().decide("s", KNOBS, obs(), profile(), lead_s=lead).plan for lead in (0, 30))
    assert later.predicted["target_rate"] - soon.predicted["target_rate"] == pytest.approx(12_000 / 60)
    # A backlog gone before the pause needs none.
    gone = at(-160, lead_s=400)
    assert gone.action == "hold" and "clear it in 375 s" in gone.reason, gone.reason


def test_a_stream_falling_behind_is_never_planned_fewer_cores():
    # the profile (one core, 1.5 ms/event) says 4 cores carry 1000 events/s, but at 8 the backlog grows: the plan
    # keeps 8 (and, as nothing else moves, holds) rather than giving cores back while behind
    eight = KNOBS.model_copy(update={"cores": 8, "source_partitions": 8})
    behind = DS2Policy().decide("s", eight, obs(backlog=100, backlog_growth=400, utilization=0.5), profile(cores=8))
    assert behind.action == "hold" and behind.plan is None and "scale up wanted" in behind.reason


def test_a_longer_interval_alone_waits_for_a_rate_the_cores_in_place_cannot_sustain():
    # 300 ms of fixed costs exceed 25 % of 0.7 s, yet one core sustains 267 events/s within the target utilization: a
    # backlog rising at 61 events/s (a file that lands after its trigger) is no reason to pause for a longer interval.
    fixed = profile(coordination=270.0, state_partitions=6)
    rising = obs(source_rate=50, processed_rate=50, backlog=20, backlog_growth=10, utilization=0.4)
    held = DS2Policy().decide("s", fixed.knobs, rising, fixed)
    assert held.action == "hold" and held.plan is None
    assert (
        "the cores in place (1) sustain 61 events/s" in held.reason
        and "(1 s -> 2 s) is not worth a pause" in held.reason
    )
    # At 400 events/s no count of cores sustains the rate at 1 s with those fixed costs: the interval grows, with cores.
    behind = DS2Policy().decide(
        "s", fixed.knobs, dataclasses.replace(rising, source_rate=400, backlog_growth=80), fixed
    )
    assert (
        behind.action == "scale_up" and behind.plan.target.trigger_interval_s == 2.0 and behind.plan.target.cores == 2
    )


def test_a_scale_down_keeps_the_caps_share_of_an_interval():
    # 12 cores idle at 1 s with a cap of 1500 records (1.5x what arrives): the plan moves the interval to 2 s and
    # gives cores back; the cap grows with the interval, not with the (never reached) capacity at 12 cores
    idle = profile(cores=12, state_partitions=12, coordination=270.0, events=1000)
    idle = dataclasses.replace(idle, knobs=idle.knobs.model_copy(update={"max_per_trigger": 1500}))
    plan = (
        DS2Policy()
        .decide("s", idle.knobs, obs(backlog=0, backlog_growth=0, utilization=0.3, processed_rate=1000), idle)
        .plan
    )
    assert plan.target.cores < 12 and plan.target.trigger_interval_s == 2.0
    assert plan.target.max_per_trigger >= 1500 * 2


def test_busy_batches_with_nothing_behind_are_not_called_catching_up():
    # Measured in CI: batches past 0.9 of the interval (a scale-up signal), no backlog, the fitted growth a hair below
    # zero; the model keeps the cores in place. The hold said "catching up: backlog 0 events".
    four = KNOBS.model_copy(update={"cores": 4, "source_partitions": 4})
    busy = obs(processed_rate=1000, backlog=0, backlog_growth=-0.3, utilization=0.95)
    held = DS2Policy().decide("s", four, busy, profile(cores=4))
    assert held.action == "hold" and "catching up" not in held.reason and "scale up wanted, but" in held.reason, (
        held.reason
    )


def test_every_decision_states_one_reason_from_the_figures_it_used():
    policy = DS2Policy(PolicyConfig(scale_down_delay_s=0))
    eight = KNOBS.model_copy(update={"cores": 8, "source_partitions": 8})

    def says_once(reason: str) -> None:  # never two claims that contradict each other
        assert reason.count("in band") <= 1 and not ("in band" in reason and "wanted" in reason), reason

    # hold, in band: the signal's own figures
    band = policy.decide("s", KNOBS, obs(processed_rate=1000, backlog=100, backlog_growth=0, utilization=0.6), None)
    assert band.reason == "in band: utilization 0.60, backlog 100 events (+0/s), 1,000 of 1,000 events/s"
    # just after a catch-up: busy batches clearing what little is left are not "in band" and not a scale-up
    caught = policy.decide("s", KNOBS, obs(processed_rate=1400, backlog=600, backlog_growth=-300, utilization=2.05))
    assert caught.action == "hold" and caught.reason.startswith("caught up: backlog 600 events"), caught.reason
    assert "utilization 2.05 is the catch-up's" in caught.reason
    # scale-up: the cores and capacities of the plan it made
    up = policy.decide("s", KNOBS, obs(), profile(), restart_s=2.0)
    predicted = up.plan.predicted
    assert up.action == "scale_up" and up.reason.startswith("DS2: 1,000 events/s offered (+")
    assert f"needs {up.plan.target.cores} cores" in up.reason
    assert f"capacity {predicted['capacity_now']:,.0f} -> {predicted['capacity_planned']:,.0f} events/s" in up.reason
    # scale-down: 8 cores for 200 events/s
    idle = obs(source_rate=200, processed_rate=200, backlog=0, backlog_growth=0, utilization=0.2)
    down = policy.decide("s", eight, idle, profile(cores=8))
    assert down.action == "scale_down" and f"needs {down.plan.target.cores} cores" in down.reason
    assert down.plan.target.cores < 8 and "200 events/s offered" in down.reason
    # a scale-down the model refuses: the cores it needs, and what one fewer would take, from its own prediction
    busy = obs(source_rate=1450, processed_rate=1450, backlog=0, backlog_growth=0, utilization=0.3)
    four = KNOBS.model_copy(update={"cores": 4, "source_partitions": 4})
    kept = policy.decide("s", four, busy, profile(cores=4))
    assert kept.action == "hold" and kept.reason.startswith("fewer cores wanted, but DS2 needs 4 cores for 1,450")
    three_share = (100 + 1450 * (1 / 3 + 0.5 * 3 / 8)) / 1000  # 3 cores: 8 state partitions in 3 waves
    assert f"3 would take {three_share:.0%} of the interval (target 70%)" in kept.reason, kept.reason
    # the same check from in band: said as a check, not as a wish the signal never had
    checked = policy.decide("s", four, dataclasses.replace(busy, utilization=0.6), profile(cores=4))
    assert checked.reason.startswith("in band: utilization 0.60") and "checked for fewer cores: DS2 needs 4" in (
        checked.reason
    ), checked.reason
    # interval change: fixed costs past a quarter of the interval move the trigger, and the reason says from what
    slow = policy.decide("s", KNOBS, obs(), profile(coordination=400.0), restart_s=2.0)
    target = slow.plan.target
    assert target.trigger_interval_s > 1.0 and f"trigger interval 1 s -> {target.trigger_interval_s:g} s" in slow.reason
    # skew: the hot operator, its ratio and what it adds to a batch
    hot = policy.decide("s", KNOBS, obs(), profile(skew=(1.0, 6.0), work=(0.2, 1.0)))
    excess = 5.0 * 1.0 * 1000 / 8  # (6 - 1) x the mean task: 1 ms x 1000 events over 8 tasks
    assert hot.action == "skew" and hot.reason.startswith(
        f"j0.d0:agg#b: its slowest task runs 6.0x the median, {excess:,.0f} ms more per batch"
    ), hot.reason
    for decision in (band, caught, up, down, kept, checked, slow, hot):
        says_once(decision.reason)


def test_a_hot_task_of_a_few_milliseconds_is_not_skew():
    # 6x the median, but the median task is 0.1 ms x 10 events / 8 tasks: 0.6 ms more per batch
    small = profile(skew=(1.0, 6.0), work=(0.02, 0.1), events=10)
    assert skewed_operators(small) == []
    assert skewed_operators(profile(skew=(1.0, 6.0), work=(0.2, 1.0))) == ["j0.d0:agg#b"]


def test_an_epoch_reads_as_a_time_for_a_person():
    assert describe_epoch("started@1796153114.481") == "started 2026-12-01 19:25:14 UTC"
    assert describe_epoch("restarted@0") == "restarted 1970-01-01 00:00:00 UTC"
    assert describe_epoch("before-recent-metrics") == "before-recent-metrics" and describe_epoch("") == "-"
