"""Carrying a RocksDB state version to a later number: the files a merged replay starts from."""

import pytest

from dagster_reconf.core.errors import StreamStateError
from dagster_reconf.core.reconfig.operators import merge_problems
from dagster_reconf.core.store.checkpoint import (
    OperatorMetadata,
    drop_planned_after,
    replay_problem,
    replayable_batches,
)
from dagster_reconf.core.store.state_versions import (
    carry_state_version,
    drop_uncommitted_state,
    state_versions_problem,
)


def store(root, *names: str, subdir: str = "state/0/0"):
    directory = root / subdir
    (directory / "SSTs").mkdir(parents=True, exist_ok=True)
    (directory / "SSTs" / "000008-abc.sst").write_text("sst")
    for name in names:
        (directory / name).write_text(f"content of {name}")
    return directory


def test_a_version_is_carried_in_every_store_with_its_checksum(tmp_path):
    first = store(tmp_path, "1.zip", "5.zip", ".5.zip.crc")
    second = store(tmp_path, "1.zip", "5.zip", subdir="state/0/1")
    joined = store(tmp_path, "5.zip", subdir="state/1/0/left-keyToNumValues")
    assert state_versions_problem(tmp_path) is None
    stale = store(tmp_path, "2.zip", subdir="state/0/2")  # an earlier partitioning's: no batch reads it
    assert carry_state_version(tmp_path, 5, 11, partitions=2) == 3
    assert not (stale / "11.zip").exists()
    for directory in (first, second, joined):
        assert (directory / "11.zip").read_text() == "content of 5.zip"
    assert (first / ".11.zip.crc").exists() and not (second / ".11.zip.crc").exists()
    assert not (first / "SSTs" / "11.zip").exists()  # the shared SST files stay where they are

    assert drop_uncommitted_state(tmp_path, 5) == 4  # three zips and one checksum past version 5
    assert sorted(p.name for p in first.iterdir()) == [".5.zip.crc", "1.zip", "5.zip", "SSTs"]


def test_a_missing_version_is_refused_before_anything_is_written(tmp_path):
    store(tmp_path, "5.zip")
    lacking = store(tmp_path, "4.zip", subdir="state/0/1")
    with pytest.raises(
        StreamStateError, match=r"state version 5 of .* is not a file in 1 store\(s\), e.g. .*state/0/1"
    ):
        carry_state_version(tmp_path, 5, 9, partitions=2)
    assert not (tmp_path / "state/0/0/9.zip").exists() and not (lacking / "9.zip").exists()


@pytest.mark.parametrize(
    ("name", "says"),
    [("6.changelog", "writes changelogs"), ("6_0f1e2d.zip", "named by unique ids")],
)
def test_versions_that_are_not_plain_files_are_named(tmp_path, name, says):
    store(tmp_path, "5.zip", name)
    assert says in state_versions_problem(tmp_path)


def test_only_operators_whose_state_ignores_batch_ends_merge():
    def op(name: str) -> OperatorMetadata:
        return OperatorMetadata("0", name)

    assert merge_problems([op("stateStoreSave"), op("dedupe"), op("sessionWindowStateStoreSaveExec")]) == []
    for name, says in [
        ("symmetricHashJoin", "matched depends on the batch"),
        ("applyInPandasWithState", "once per key and batch"),
        ("dedupeWithinWatermark", "first copy expired"),
        ("globalLimit", "not an operator known to merge"),
    ]:
        (problem,) = merge_problems([op("stateStoreSave"), op(name)])
        assert f"({name})" in problem and says in problem


def test_a_merged_log_replays_from_each_batch_s_start_entry(tmp_path):
    def log(offsets: list[int], commits: list[int]) -> None:
        for directory, ids in (("offsets", offsets), ("commits", commits)):
            (tmp_path / directory).mkdir(exist_ok=True)
            for batch in ids:
                (tmp_path / directory / str(batch)).write_text("v1\n{}\n{}")

    log([0, 1, 2, 6, 7], [0, 1, 2, 7])  # batch 7 merged 3-7 from its start entry 6 (planned, never committed)
    assert replay_problem(tmp_path) is None and replayable_batches(tmp_path, 7) == [0, 1, 2, 7]
    log([9], [9])  # batch 9's start entry, 8, is gone: nothing tells where it started
    assert "no entry before batch 9" in replay_problem(tmp_path)
    (tmp_path / "offsets" / "10").write_text("planned")
    (tmp_path / "offsets" / ".10.crc").write_text("")
    assert drop_planned_after(tmp_path, 9) == 2 and not (tmp_path / "offsets" / "10").exists()
