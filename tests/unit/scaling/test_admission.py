"""A cap on what a source admits per batch, read from recorded progress, and what DS2 decides with it: the knob's
cap is planned, a cap in the user's code is named with the value that would sustain the rate, and a stream its cap
holds back is never held, as if it kept up."""

import dataclasses

import pytest

from dagster_reconf.core.scaling.admission import Admission, judge_cap
from dagster_reconf.core.scaling.ds2_policy import DS2Policy
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.core.scaling.scaling_plan import Knobs
from dagster_reconf.core.scaling.signal import observe
from dagster_reconf.core.store.metrics import progress_frame

from .test_model import profile
from .test_policy import obs


def python_batches(admitted: int | None, offered_per_s: float = 50.0, batches: int = 10, batch_ms: int = 400):
    """The progress frame of :func:`python_records`."""
    return progress_frame(python_records(admitted, offered_per_s, batches, batch_ms))


def python_records(admitted: int | None, offered_per_s: float = 50.0, batches: int = 10, batch_ms: int = 400):
    """Progress records of a Python source offered ``offered_per_s``, one batch a second, each reading at most
    ``admitted`` rows (its ReadMaxRows; None: all there is)."""
    records, end = [], 0
    for n in range(batches):
        latest = int(offered_per_s * (n + 1))
        start, end = end, (latest if admitted is None else min(latest, end + admitted))
        source = {
            "description": "PythonMicroBatchStream[mine]",
            "startOffset": {"index": start},
            "endOffset": {"index": end},
            "latestOffset": {"index": latest},
            "numInputRows": end - start,
        }
        progress = {
            "batchId": n,
            "timestamp": f"2026-12-01T00:00:{n:02d}.000Z",
            "sources": [source],
            "durationMs": {"triggerExecution": batch_ms},
        }
        records.append({"kind": "progress", "stream": "s", "progress": progress})
    return records


def test_a_source_that_reads_the_same_count_while_more_waits_is_capped():
    signal = observe(python_batches(admitted=20), 1.0, 120.0, warmup_batches=2)
    assert signal.admission == Admission(
        20.0, 20.0, "the Python source's read limit (getDefaultReadLimit: ReadMaxRows)"
    )
    assert signal.admission.rate(1.0, 0.4) == 20.0 and signal.admission.units_for(55.0, 1.0) == 55
    assert signal.backlog_growth == pytest.approx(30.0, rel=0.05)


@pytest.mark.parametrize(
    "rows",
    [
        pytest.param(python_batches(admitted=None), id="uncapped, keeping up: nothing waits behind a batch"),
        pytest.param(python_batches(admitted=80), id="a cap above the rate: batches read what arrived"),
    ],
)
def test_a_stream_whose_batches_take_what_arrived_has_no_binding_cap(rows):
    assert observe(rows, 1.0, 120.0, warmup_batches=2).admission is None


def test_a_cap_in_the_users_code_is_named_with_the_value_that_would_sustain_the_rate_never_held():
    signal = observe(python_batches(admitted=20, batches=12), 1.0, 120.0, warmup_batches=2)
    knobs = Knobs(cores=1, state_partitions=4, trigger_interval_s=1.0)  # no max_per_trigger knob: the user's cap
    decision = DS2Policy().decide("s", knobs, signal, profile(cores=1, state_partitions=4))
    assert decision.action == "cannot_keep_up" and decision.plan is None and not decision.requests_run
    assert "admits 20 events a batch (20 rows): 20 events/s at 1 s, under the 50 offered" in decision.reason
    assert "the backlog cannot clear" in decision.reason and "whatever the cores" in decision.reason
    wanted = 50 + signal.backlog / 60.0  # the offered rate plus the backlog within catch_up_s
    assert f"raise it to {int(-(-wanted // 1)):,} (it sustains {wanted:,.0f} events/s at 1 s)" in decision.reason


def test_the_knobs_cap_is_raised_at_the_interval_it_has_never_a_longer_trigger():
    signal = observe(python_batches(admitted=20, batches=12), 1.0, 120.0, warmup_batches=2)
    capped = profile(cores=1, state_partitions=4)
    capped = dataclasses.replace(capped, knobs=capped.knobs.model_copy(update={"max_per_trigger": 20}))
    decision = DS2Policy().decide("s", capped.knobs, signal, capped)
    assert decision.action == "scale_up" and decision.requests_run
    target = decision.plan.target
    assert target.trigger_interval_s == 1.0, decision.reason  # a longer interval would admit less
    wanted = decision.plan.predicted["target_rate"]
    assert target.max_per_trigger >= wanted > 50 and target.cores >= 1
    assert "the max_per_trigger knob is its cap: 20 ->" in decision.reason


def test_a_cap_that_admits_more_than_is_offered_is_not_what_holds_a_stream_back():
    admission = Admission(events_per_batch=100.0, units_per_batch=2.0, option="maxFilesPerTrigger")
    kwargs = dict(knob=None, interval_s=1.0, batch_s=0.3, offered=50.0)
    assert judge_cap(admission, **kwargs, wanted=90.0) is None
    slow = judge_cap(admission, **kwargs, wanted=120.0)  # it keeps up, but clears the backlog slowly
    assert slow.keeps_up and "maxFilesPerTrigger admits 100 events a batch (2 files)" in slow.reason
    assert "raise it to 3 (it sustains 120 events/s at 1 s)" in slow.reason


def test_a_judged_hold_while_the_backlog_grows_is_cannot_keep_up():
    # 8 cores, the most the policy allows, and still behind: no plan within its bounds helps, so it says so
    eight = Knobs(cores=8, source_partitions=8, state_partitions=8, trigger_interval_s=1.0)
    behind = obs(backlog=50_000, backlog_growth=400, utilization=1.6)
    decision = DS2Policy(PolicyConfig(max_cores=8)).decide("s", eight, behind, profile(cores=8))
    assert decision.action == "cannot_keep_up" and decision.reason.startswith("cannot keep up: ")


def test_full_batches_that_fill_the_interval_are_the_cores_limit_not_the_caps():
    # the same cap, but each batch takes 1.4 s of a 1 s interval: more cores, not a larger cap, would keep up
    assert observe(python_batches(admitted=20, batch_ms=1400), 1.0, 120.0, warmup_batches=2).admission is None
    assert observe(python_batches(admitted=20, batch_ms=950), 1.0, 120.0, warmup_batches=2).admission is None
