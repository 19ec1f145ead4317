"""The scaling sensor's tick as a plain function: what it decides for each state of a stream, without Dagster."""

import pytest

from dagster_reconf.core.ledger.ledger import StreamLock
from dagster_reconf.core.progress.lifecycle import QueryTerminated, Started
from dagster_reconf.core.scaling.baselines import DynamicAllocationPolicy
from dagster_reconf.core.scaling.policy_config import PolicyConfig
from dagster_reconf.dagster.scaling_sensor import ScalingCursor, StreamFacts, scaling_tick

from ..scaling.test_policy import progress

SPEC = {"name": "s", "entrypoint": None, "master": "local[1]", "state_partitions": 8, "source_partitions": 1}
BEHIND = [Started(stream="s", spec=SPEC, recorded_at=0.0).to_record()] + [
    progress(b, b, 500, 1000 * (b + 1), duration=1400) for b in range(10)
]
POLICY = DynamicAllocationPolicy(PolicyConfig(stabilization_s=0))  # plans without traces: doubles the cores


@pytest.fixture(name="traces_read")
def traces_read_fixture():
    return []


def tick(facts, traces_read, cursor=None):
    def activities():
        traces_read.append(True)
        return None

    return scaling_tick("s", POLICY, cursor or ScalingCursor(), BEHIND, 4096, facts, activities, now=100.0)


@pytest.mark.parametrize(
    "facts,reason",
    [
        (StreamFacts(attached=False, running=False), "not running (no driver)"),
        (StreamFacts(attached=False, running=True, run_in_flight="r-1"), "reconfiguration run r-1 is in flight"),
        (
            StreamFacts(attached=False, running=True, lock=StreamLock("s", "rc-1", "abc", "host:1", 0.0)),
            "reconfiguration rc-1 (plan abc) holds the stream with no run in flight: re-execute its failed run to "
            "finish it, or `reconf reconfigure abort s`",
        ),
    ],
    ids=["no-driver", "run-in-flight", "lock-held"],
)
def test_a_held_stream_is_said_and_its_traces_are_not_read(facts, reason, traces_read):
    result = tick(facts, traces_read)
    assert (result.reason, result.plan, result.decision, traces_read) == (reason, None, None, [])
    assert result.cursor.offset == 4096 and result.cursor.window, "the window moves on even when nothing is decided"


def test_a_stream_behind_gets_a_plan_once(traces_read):
    first = tick(StreamFacts(attached=False, running=True), traces_read)
    assert first.plan is not None and first.plan.target.cores == 2 and traces_read == [True]
    assert first.reason.startswith(f"requesting plan {first.plan.plan_hash}")
    assert first.cursor.requested == first.plan.plan_hash
    again = tick(StreamFacts(attached=False, running=True), traces_read, cursor=first.cursor)
    assert again.plan is None and again.reason == f"plan {first.plan.plan_hash} was already requested"


def test_an_attached_stream_is_recommended_a_plan_never_applied(traces_read):
    result = tick(StreamFacts(attached=True, running=True), traces_read)
    assert result.plan is None and result.decision.plan is not None
    assert result.reason.endswith("(attached: recommended on ds2_plans, never applied here)")


def test_an_attached_stream_whose_query_ended_is_pointed_at_the_advice_for_its_next_run(traces_read):
    ended = BEHIND + [QueryTerminated(stream="s", recorded_at=1_767_225_600.0).to_record()]
    facts = StreamFacts(attached=True, running=True)
    result = scaling_tick("s", POLICY, ScalingCursor(), ended, 4096, facts, lambda: None, now=1_767_225_700.0)
    assert result.plan is None and result.decision.action == "hold"
    assert result.reason == (
        "its query ended at 2026-01-01 00:00:00 UTC: nothing to decide until it runs again; the advice for its next "
        "run is on ds2_plans (materialize its partition) or `reconf plan s`"
    )
