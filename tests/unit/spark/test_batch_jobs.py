"""Whether an interrupted batch may have reached its sink, from the jobs Spark's status store lists."""

import pytest

from dagster_reconf.core.spark.batch_jobs import StreamJob, may_have_written

RUN = "2f0c1d7e-0000-4000-8000-000000000001"


def described(job_id: int, status: str, batch: int, run: str = RUN) -> StreamJob:
    return StreamJob.from_description(job_id, status, f"orders\nid = 9a1b\nrunId = {run}\nbatch = {batch}")


def test_descriptions_name_the_run_and_batch():
    assert described(3, "SUCCEEDED", 12) == StreamJob(3, "SUCCEEDED", RUN, 12)
    assert StreamJob.from_description(4, "SUCCEEDED", None) == StreamJob(4, "SUCCEEDED", None, None)
    assert StreamJob.from_description(5, "SUCCEEDED", "batch = 3") == StreamJob(5, "SUCCEEDED", None, None)


@pytest.mark.parametrize(
    ("jobs", "written"),
    [
        ([described(0, "SUCCEEDED", 6), described(1, "FAILED", 7)], False),  # the batch's job was cancelled by the stop
        ([described(0, "SUCCEEDED", 6)], False),  # stopped before any job of it
        (
            [described(0, "SUCCEEDED", 6), described(1, "SUCCEEDED", 7), described(2, "FAILED", 7)],
            True,
        ),  # wrote, then stopped
        ([described(0, "SUCCEEDED", 6), described(1, "RUNNING", 7)], True),  # not over yet: it may still commit a write
        (
            [described(0, "SUCCEEDED", 6), StreamJob(1, "SUCCEEDED")],
            True,
        ),  # a job without a batch's name after the last batch
        (
            [StreamJob(0, "SUCCEEDED"), described(1, "SUCCEEDED", 6), described(2, "FAILED", 7)],
            False,
        ),  # one before it: not ours
        (
            [StreamJob(0, "SUCCEEDED"), described(1, "FAILED", 7)],
            True,
        ),  # the run's first batch: unnamed jobs cannot be placed
        (
            [described(0, "SUCCEEDED", 6), described(1, "SUCCEEDED", 7, run="another-run"), described(2, "FAILED", 7)],
            False,
        ),
    ],
)
def test_only_jobs_that_can_be_the_batchs_own_and_did_not_fail_count(jobs, written):
    assert may_have_written(jobs, RUN, 7) is written


@pytest.mark.parametrize(
    ("jobs", "written"),
    [
        ([described(0, "SUCCEEDED", 6), described(1, "RUNNING", 7)], False),  # the stop cancels it: wait for nothing
        ([described(0, "SUCCEEDED", 6), described(1, "SUCCEEDED", 7), described(2, "RUNNING", 7)], True),  # wrote: wait
        ([described(0, "SUCCEEDED", 6), StreamJob(1, "RUNNING")], False),
    ],
)
def test_before_a_stop_only_succeeded_jobs_count(jobs, written):
    assert may_have_written(jobs, RUN, 7, count_running=False) is written
