"""Kafka positions from a checkpoint in Spark's own format, lag against broker offsets, and the preflight rules
(partitions, retention) on hand-computed cases. The brokers' side runs for real in tests/integration/test_kafka.py."""

import json

import pytest
from pydantic import ValidationError

from dagster_reconf.core.kafka import (
    KafkaAccess,
    PartitionOffsets,
    TopicFacts,
    committed_positions,
    consumer_lag,
    partition_problems,
    replay_start_positions,
    retention_problems,
    topic_partitions,
)
from dagster_reconf.core.kafka.positions import kafka_source_indexes

KAFKA = {"description": "KafkaV2[Subscribe[clicks]]"}
FILES = {"description": "FileStreamSource[file:/in]"}


def _checkpoint(tmp_path, batches, committed):
    """A checkpoint with a file source first and a Kafka source second, as Spark writes them."""
    (tmp_path / "offsets").mkdir(parents=True)
    (tmp_path / "commits").mkdir()
    for batch, kafka in batches.items():
        lines = [
            "v1",
            json.dumps({"batchWatermarkMs": 0, "conf": {}}),
            json.dumps({"logOffset": batch}),
            json.dumps(kafka),
        ]
        (tmp_path / "offsets" / str(batch)).write_text("\n".join(lines))
    for batch in committed:
        (tmp_path / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (tmp_path / "sources" / "1").mkdir(parents=True)
    (tmp_path / "sources" / "1" / "0").write_bytes(b'\x00v1\n{"clicks":{"0":5,"1":0}}')
    return tmp_path


def test_committed_and_replay_positions_come_from_the_kafka_lines_only(tmp_path):
    progress = {"sources": [FILES, KAFKA]}
    assert kafka_source_indexes(progress) == [1]
    checkpoint = _checkpoint(
        tmp_path, {0: {"clicks": {"0": 10, "1": 4}}, 1: {"clicks": {"0": 20, "1": 9}}, 2: {"clicks": {"0": 30}}}, [0, 1]
    )
    assert committed_positions(checkpoint, [1]) == {"clicks": {0: 20, 1: 9}}  # batch 2 is planned, not committed
    assert replay_start_positions(checkpoint, 0, [1]) == {"clicks": {0: 5, 1: 0}}  # the source's initial offsets
    assert replay_start_positions(checkpoint, 2, [1]) == {"clicks": {0: 20, 1: 9}}  # the end of batch 1
    assert committed_positions(_checkpoint(tmp_path / "empty", {0: {"clicks": {"0": 1}}}, []), [1]) is None


def test_topic_partitions_count_what_the_last_batch_planned_from():
    progress = {"sources": [FILES, {**KAFKA, "latestOffset": '{"clicks": {"0": 7, "1": 3, "2": 0}}'}]}
    assert topic_partitions(progress) == {"clicks": 3}
    assert topic_partitions({"sources": [FILES]}) == {}


def test_lag_is_latest_minus_committed_and_a_new_partition_lags_by_what_retention_keeps():
    facts = {
        "clicks": TopicFacts(
            "clicks", {0: PartitionOffsets(0, 25), 1: PartitionOffsets(0, 9), 2: PartitionOffsets(3, 10)}
        )
    }
    lag = consumer_lag({"clicks": {0: 20, 1: 9}}, facts)
    assert [p.lag for p in lag.partitions] == [5, 0, 7]
    assert lag.total == 12 and lag.unread_partitions == ["clicks/2"]
    assert lag.as_dict()["partitions"][2] == {
        "topic": "clicks",
        "partition": 2,
        "committed": None,
        "earliest": 3,
        "latest": 10,
        "lag": 7,
    }


def test_fewer_source_partitions_than_topic_partitions_contradict_the_topic():
    assert partition_problems(None, {"clicks": 4}) == []
    assert partition_problems(4, {"clicks": 4}) == [] and partition_problems(8, {"clicks": 4}) == []
    (problem,) = partition_problems(2, {"clicks": 4})
    assert "2 source partitions" in problem and "4 partitions (clicks (4))" in problem and "at least 4" in problem


def test_a_replay_below_the_earliest_kept_offset_is_refused_with_the_partition():
    facts = {"clicks": TopicFacts("clicks", {0: PartitionOffsets(100, 300), 1: PartitionOffsets(0, 200)})}
    assert retention_problems({"clicks": {0: 100, 1: 0}}, facts, "a replay") == []
    (problem,) = retention_problems({"clicks": {0: 40, 1: 0}}, facts, "a replay from batch 0")
    assert "clicks/0 from 40 (earliest kept: 100)" in problem and "strategy 'native'" in problem


def test_kafka_access_names_the_bad_value():
    with pytest.raises(ValidationError, match=r"bootstrap server 'broker' is not host:port"):
        KafkaAccess(bootstrap_servers="broker")
    with pytest.raises(ValidationError, match=r"client_config sets \['group.id'\]"):
        KafkaAccess(bootstrap_servers="b:9092", client_config={"group.id": "mine"})
    settings = KafkaAccess(bootstrap_servers="b1:9092,b2:9092", client_config={"security.protocol": "SSL"})
    assert settings.client_settings()["enable.auto.commit"] is False
    assert settings.client_settings()["security.protocol"] == "SSL"


def test_each_batch_records_the_partitions_it_was_planned_from_so_a_grown_topic_shows_at_once():
    from dagster_reconf.core.store.metrics import progress_row

    def batch(latest):
        offsets = json.dumps({"clicks": {str(p): 10 for p in range(latest)}})
        return {
            "batchId": 3,
            "sources": [{**KAFKA, "startOffset": offsets, "endOffset": offsets, "latestOffset": offsets}],
        }

    assert progress_row(batch(4))["kafka_partitions"] == 4
    assert progress_row(batch(6))["kafka_partitions"] == 6  # the topic gained two partitions
    assert progress_row({"batchId": 1, "sources": [FILES]})["kafka_partitions"] is None


def test_a_kafka_sink_says_what_a_stop_in_the_middle_of_a_batch_may_repeat():
    from dagster_reconf.core.reconfig.kafka_preflight import repeat_bound

    assert repeat_bound({"sink": {"numOutputRows": 1234}}, "file") is None
    said = repeat_bound({"sink": {"numOutputRows": 1234}}, "kafka")
    assert "at-least-once" in said and "repeat up to 1,234 records" in said
    assert "up to one batch's output" in repeat_bound({}, "kafka")


def test_a_bad_client_config_or_silent_brokers_are_said_with_the_fix():
    from dagster_reconf.core.errors import SourceAccessError
    from dagster_reconf.core.kafka import read_topics

    with pytest.raises(SourceAccessError, match=r"kafka.client_config is not a valid librdkafka configuration"):
        read_topics(KafkaAccess(bootstrap_servers="127.0.0.1:1", client_config={"no.such.setting": "1"}), ["t"])
    silent = KafkaAccess(bootstrap_servers="127.0.0.1:1", timeout_s=1)  # nothing listens on port 1
    with pytest.raises(SourceAccessError, match=r"Kafka brokers 127.0.0.1:1 did not answer in 1 s"):
        read_topics(silent, ["t"])
