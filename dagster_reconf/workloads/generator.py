"""Deterministic, vectorized event generators: Nexmark and word sentences.

Why this shape: every later feature (replay after a restart, reconfiguration that
changes source partitions, the batch oracle) needs the event at index ``i`` to be the
same no matter which partition, batch or process produces it. So every random draw is
a pure function of ``(seed, index, draw number)`` (a SplitMix64 hash, vectorized in
numpy), and event time is a pure function of the index (``event_time_rate`` events per
second of event time), independent of how fast the events are actually emitted.

The Nexmark mix and id schemes follow the reference generator (Beam/Flink Nexmark):
in every block of 50 events, 1 person, 3 auctions and 46 bids; bids go mostly to "hot"
auctions and come mostly from "hot" bidders; ids may lead slightly ahead of the
newest entity, as in the original.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

__all__ = [
    "NEXMARK_SCHEMA",
    "WORDS_SCHEMA",
    "EventGenerator",
    "NexmarkGenerator",
    "WordsGenerator",
]

PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
PROPORTION_DENOMINATOR = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_AUCTION_RATIO = 2
HOT_BIDDER_RATIO = 4
HOT_SELLER_RATIO = 4
NUM_IN_FLIGHT_AUCTIONS = 100
NUM_ACTIVE_PEOPLE = 1000
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
MIN_AUCTION_LENGTH_MS = 2_000
MAX_AUCTION_LENGTH_MS = 20_000

EVENT_PERSON, EVENT_AUCTION, EVENT_BID = 0, 1, 2

FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"]
US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
]
CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]
ITEMS = ["lamp", "chair", "bike", "guitar", "watch", "camera", "kettle", "desk", "phone", "book"]

_TS = pa.timestamp("us", tz="UTC")

PERSON_TYPE = pa.struct(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("email_address", pa.string()),
        ("credit_card", pa.string()),
        ("city", pa.string()),
        ("state", pa.string()),
        ("date_time", _TS),
    ]
)
AUCTION_TYPE = pa.struct(
    [
        ("id", pa.int64()),
        ("item_name", pa.string()),
        ("description", pa.string()),
        ("initial_bid", pa.int64()),
        ("reserve", pa.int64()),
        ("date_time", _TS),
        ("expires", _TS),
        ("seller", pa.int64()),
        ("category", pa.int64()),
    ]
)
BID_TYPE = pa.struct(
    [
        ("auction", pa.int64()),
        ("bidder", pa.int64()),
        ("price", pa.int64()),
        ("channel", pa.string()),
        ("url", pa.string()),
        ("date_time", _TS),
    ]
)
NEXMARK_SCHEMA = pa.schema(
    [
        ("event_index", pa.int64()),
        ("event_type", pa.int32()),
        ("date_time", _TS),
        ("person", PERSON_TYPE),
        ("auction", AUCTION_TYPE),
        ("bid", BID_TYPE),
    ]
)
WORDS_SCHEMA = pa.schema(
    [
        ("event_index", pa.int64()),
        ("date_time", _TS),
        ("sentence", pa.string()),
    ]
)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _hash64(seed: int, index: np.ndarray, draw: int) -> np.ndarray:
    """SplitMix64 of (seed, index, draw): a counter-based random uint64 per index."""
    with np.errstate(over="ignore"):
        key = np.uint64((seed * 0x100000001B3 + draw * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF)
        z = index.astype(np.uint64) * _GOLDEN + key
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def _uniform(seed: int, index: np.ndarray, draw: int) -> np.ndarray:
    """Uniform floats in [0, 1) per index."""
    return (_hash64(seed, index, draw) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _below(seed: int, index: np.ndarray, draw: int, bound: np.ndarray | int) -> np.ndarray:
    """Integers in [0, bound) per index (bound may vary per index, must be >= 1)."""
    return np.floor(_uniform(seed, index, draw) * bound).astype(np.int64)


@dataclass(frozen=True)
class EventGenerator(ABC):
    """Common contract: ``batch(start, end)`` returns events ``[start, end)`` as Arrow.

    Attributes:
        seed: makes the stream reproducible; two generators with the same seed and
            settings produce identical events for identical index ranges.
        event_time_rate: events per second of *event time* (not wall clock).
        base_time_ms: event time of index 0, in epoch milliseconds.
    """

    seed: int = 42
    event_time_rate: int = 1000
    base_time_ms: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z

    schema: pa.Schema = NEXMARK_SCHEMA

    def event_time_us(self, index: np.ndarray) -> np.ndarray:
        """Event time of each index in epoch microseconds (deterministic, monotone)."""
        return self.base_time_ms * 1000 + (index * 1_000_000) // self.event_time_rate

    @abstractmethod
    def batch(self, start: int, end: int) -> pa.RecordBatch:
        """Events ``[start, end)`` as one Arrow record batch with :attr:`schema`."""

    def batches(self, start: int, end: int, chunk: int = 65_536) -> Iterator[pa.RecordBatch]:
        """Events ``[start, end)`` in record batches of at most ``chunk`` rows."""
        for lo in range(start, end, chunk):
            yield self.batch(lo, min(end, lo + chunk))


@dataclass(frozen=True)
class NexmarkGenerator(EventGenerator):
    """Nexmark persons, auctions and bids in the standard 1:3:46 mix."""

    schema: pa.Schema = NEXMARK_SCHEMA

    def batch(self, start: int, end: int) -> pa.RecordBatch:
        seed = self.seed
        idx = np.arange(start, end, dtype=np.int64)
        epoch, offset = np.divmod(idx, PROPORTION_DENOMINATOR)
        etype = np.where(
            offset < PERSON_PROPORTION,
            EVENT_PERSON,
            np.where(offset < PERSON_PROPORTION + AUCTION_PROPORTION, EVENT_AUCTION, EVENT_BID),
        ).astype(np.int32)
        ts = pa.array(self.event_time_us(idx), type=_TS)

        last_person = epoch * PERSON_PROPORTION  # base-0 id of the newest person
        auction_offset = np.where(
            offset < PERSON_PROPORTION,
            AUCTION_PROPORTION - 1,
            np.minimum(offset - PERSON_PROPORTION, AUCTION_PROPORTION - 1),
        )
        last_auction = np.where(offset < PERSON_PROPORTION, epoch - 1, epoch) * AUCTION_PROPORTION + auction_offset
        last_auction = np.maximum(last_auction, 0)

        def some_person(draw: int) -> np.ndarray:
            people = last_person + 1
            active = np.minimum(people, NUM_ACTIVE_PEOPLE)
            return people - active + _below(seed, idx, draw, active + PERSON_ID_LEAD)

        def some_auction(draw: int) -> np.ndarray:
            low = np.maximum(last_auction - NUM_IN_FLIGHT_AUCTIONS, 0)
            return low + _below(seed, idx, draw, last_auction - low + 1 + AUCTION_ID_LEAD)

        def price(draw: int) -> np.ndarray:
            return np.round(np.power(10.0, _uniform(seed, idx, draw) * 6.0) * 100.0).astype(np.int64)

        is_person, is_auction, is_bid = etype == EVENT_PERSON, etype == EVENT_AUCTION, etype == EVENT_BID

        first = _below(seed, idx, 1, len(FIRST_NAMES))
        last = _below(seed, idx, 2, len(LAST_NAMES))
        names = pa.array(np.char.add(np.char.add(np.array(FIRST_NAMES)[first], " "), np.array(LAST_NAMES)[last]))
        person = pa.StructArray.from_arrays(
            [
                pa.array(FIRST_PERSON_ID + last_person),
                names,
                pa.array(np.char.add(np.array([n.lower() for n in LAST_NAMES])[last], "@example.com")),
                pa.array(np.char.add("4000 0000 0000 ", np.char.zfill(_below(seed, idx, 3, 10_000).astype(str), 4))),
                pa.array(np.array(US_CITIES)[_below(seed, idx, 4, len(US_CITIES))]),
                pa.array(np.array(US_STATES)[_below(seed, idx, 5, len(US_STATES))]),
                ts,
            ],
            fields=list(PERSON_TYPE),
            mask=pa.array(~is_person),
        )

        hot_seller = _below(seed, idx, 6, HOT_SELLER_RATIO) > 0
        seller = np.where(hot_seller, (last_person // HOT_SELLER_RATIO) * HOT_SELLER_RATIO, some_person(7))
        initial_bid = price(8)
        length_ms = MIN_AUCTION_LENGTH_MS + _below(seed, idx, 9, MAX_AUCTION_LENGTH_MS - MIN_AUCTION_LENGTH_MS)
        item = _below(seed, idx, 10, len(ITEMS))
        auction = pa.StructArray.from_arrays(
            [
                pa.array(FIRST_AUCTION_ID + last_auction),
                pa.array(np.array(ITEMS)[item]),
                pa.array(np.char.add("a fine ", np.array(ITEMS)[item])),
                pa.array(initial_bid),
                pa.array(initial_bid + price(11)),
                ts,
                pa.array(self.event_time_us(idx) + length_ms * 1000, type=_TS),
                pa.array(FIRST_PERSON_ID + seller),
                pa.array(FIRST_CATEGORY_ID + _below(seed, idx, 12, NUM_CATEGORIES)),
            ],
            fields=list(AUCTION_TYPE),
            mask=pa.array(~is_auction),
        )

        hot_auction = _below(seed, idx, 13, HOT_AUCTION_RATIO) > 0
        bid_auction = np.where(hot_auction, (last_auction // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO, some_auction(14))
        hot_bidder = _below(seed, idx, 15, HOT_BIDDER_RATIO) > 0
        bidder = np.where(hot_bidder, (last_person // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1, some_person(16))
        channel = _below(seed, idx, 17, len(CHANNELS))
        bid = pa.StructArray.from_arrays(
            [
                pa.array(FIRST_AUCTION_ID + bid_auction),
                pa.array(FIRST_PERSON_ID + bidder),
                pa.array(price(18)),
                pa.array(np.array(CHANNELS)[channel]),
                pa.array(np.char.add("https://nexmark.example/item/", (bid_auction % 1000).astype(str))),
                ts,
            ],
            fields=list(BID_TYPE),
            mask=pa.array(~is_bid),
        )
        return pa.RecordBatch.from_arrays(
            [pa.array(idx), pa.array(etype), ts, person, auction, bid], schema=NEXMARK_SCHEMA
        )


@dataclass(frozen=True)
class WordsGenerator(EventGenerator):
    """Sentences of ``words_per_sentence`` words drawn uniformly from ``vocabulary`` words.

    The vocabulary size bounds the number of keys the word count keeps in state, which
    makes it the knob for state-size experiments (10k, 100k, 1M keys).
    """

    vocabulary: int = 10_000
    words_per_sentence: int = 8
    schema: pa.Schema = WORDS_SCHEMA

    def batch(self, start: int, end: int) -> pa.RecordBatch:
        idx = np.arange(start, end, dtype=np.int64)
        words = np.stack(
            [_below(self.seed, idx, 100 + k, self.vocabulary) for k in range(self.words_per_sentence)], axis=1
        )
        tokens = np.char.add("w", words.astype(str))
        sentence = tokens[:, 0]
        for k in range(1, self.words_per_sentence):
            sentence = np.char.add(np.char.add(sentence, " "), tokens[:, k])
        return pa.RecordBatch.from_arrays(
            [pa.array(idx), pa.array(self.event_time_us(idx), type=_TS), pa.array(sentence)], schema=WORDS_SCHEMA
        )
