"""The Nexmark topic writer's records: keyed by the entity they are about, each the generator's event as JSON."""

import json

from dagster_reconf.workloads.generator import EVENT_AUCTION, EVENT_BID, EVENT_PERSON, NexmarkGenerator
from dagster_reconf.workloads.nexmark_topic import NexmarkTopicWriter


def test_records_are_the_generator_s_events_keyed_by_auction_or_person():
    writer = NexmarkTopicWriter("127.0.0.1:1", "nexmark", seed=7)  # no broker needed until a write
    records = list(writer.records(100, 150))
    events = NexmarkGenerator(seed=7).batch(100, 250).to_pylist()
    assert len(records) == len(events) == 150
    kinds = set()
    for (key, value), event in zip(records, events, strict=True):
        parsed = json.loads(value)
        assert parsed["event_index"] == event["event_index"] and parsed["event_type"] == event["event_type"]
        kind = event["event_type"]
        kinds.add(kind)
        expected = {
            EVENT_AUCTION: event["auction"] and event["auction"]["id"],
            EVENT_PERSON: event["person"] and event["person"]["id"],
            EVENT_BID: event["bid"] and event["bid"]["auction"],
        }[kind]
        assert key == str(expected).encode()
        assert parsed["date_time"] == event["date_time"].isoformat()
    assert kinds == {EVENT_AUCTION, EVENT_PERSON, EVENT_BID}
    assert list(writer.records(100, 150)) == records  # the same indexes, the same records: a rewrite is exact
