"""State migration of a running stream: Spark's native repartition against a replay, by state size.

``python -m benchmarks.reconfiguration [--quick] [--sizes 1000000] [--strategies native,precopy] [--trigger-s 1,5]``

For each state size (10k, 100k and 1M keys; ``--quick``: 10k and 100k) a word count
stream (``local[2]``, RocksDB state, 4 state partitions) first loads a history that
fills its state (``HISTORY_WORDS_PER_KEY`` words per key, drawn uniformly from a
vocabulary of that many words: replay's cost depends on this, native's does not), then runs at a steady rate it
sustains. On that running
stream, in the same run, two reconfigurations through the full journaled steps
(preflight ... record, :mod:`dagster_reconf.core.reconfig`):

* ``native``: state partitions 4 -> 8 with Spark's offline repartition;
* ``precopy``: 8 -> 6 with a repartitioned copy prepared while the stream runs; the pause
  replays only the batches committed since its last round (a copy left too far behind falls
  back to the native migration in the pause: ``fell_back`` says why);
* ``replay`` (the baseline): 6 -> 4 by rebuilding state in a new checkpoint from the
  stream's whole history.

Per reconfiguration: ``downtime_s`` (pause begin to the first batch committed after
the resume), ``max_latency_s`` (the longest an event waited between being offered by
the source and its batch committing, over the change), ``catch_up_s`` (resume to the
backlog back to normal), and the migrate and verify times. Correctness: after both
changes the stream's output is compared with the batch oracle over every event it
consumed: ``lost`` and ``duplicated`` rows (multiset difference) must be 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from dagster_reconf.core.ledger import AuditLedger, default_ledger_url
from dagster_reconf.core.reconfig import ExecutionPlan, LocalStream, Reconfiguration, Reconfigurer
from dagster_reconf.core.spark.runtime import StreamRuntime
from dagster_reconf.core.store.metrics import progress_row
from dagster_reconf.core.store.paths import StreamPaths
from dagster_reconf.workloads.oracle import check_stream_output
from dagster_reconf.workloads.pacing import pacing_anchor
from dagster_reconf.workloads.streams import bundled_spec

from ._common import emit, parse_args

WORDS_PER_SENTENCE = 50
HISTORY_WORDS_PER_KEY = 10  # uniform draws: all but ~0.005% of the vocabulary ends up in state. What replay
# costs grows with the history, native with the state: at 3 words per key (a stream just old enough to fill
# its state) replay's max latency was 4.8x native's at 1M keys, see the README.
STEADY_SENTENCES_PER_S = 40.0  # 2,000 words/s: well within the stream's capacity
LOAD_BATCH_SENTENCES = 4_000  # 200k words per batch while loading the history
TRIGGER_S = 1.0
CAUGHT_UP_TIMEOUT_S = 900.0
OBSERVE_TIMEOUT_S = 300.0
STEPS = (("native", 8), ("precopy", 6), ("replay", 4))  # strategy, state partitions after it


def wait_caught_up(runtime: StreamRuntime, history: int) -> None:
    """Until the stream has consumed its history and its backlog is under a few seconds of events."""
    deadline = time.monotonic() + CAUGHT_UP_TIMEOUT_S
    while time.monotonic() < deadline:
        progress = runtime.query.lastProgress if runtime.query is not None else None
        if progress:
            row = progress_row(dict(progress))
            if (row["end_offset"] or 0) >= history and (
                row["backlog_events"] or 0
            ) <= 5 * STEADY_SENTENCES_PER_S:  # None: a first batch
                return
        time.sleep(1.0)
    raise RuntimeError(f"stream did not load its history of {history:,} sentences in {CAUGHT_UP_TIMEOUT_S:g} s")


def reconfigure(runtime: StreamRuntime, ledger: AuditLedger, strategy: str, partitions: int) -> dict[str, Any]:
    plan = ExecutionPlan.of(runtime.spec).model_dump()
    plan["partitioning"]["state_partitions"] = partitions
    result = Reconfigurer(LocalStream(runtime), ledger, strategy=strategy, observe_timeout_s=OBSERVE_TIMEOUT_S).run(
        plan, trigger={"kind": "benchmark"}
    )
    if result.outcome != "succeeded":
        raise RuntimeError(f"{strategy} reconfiguration ended {result.outcome}: {result.results}")
    observed = result.observation
    return {
        "downtime_s": observed.downtime_s,
        "max_latency_s": observed.max_event_latency_s,
        "catch_up_s": observed.catch_up_s,
        "pause_s": observed.pause_s,
        "migrate_s": result.timings["migrate"],
        "verify_s": result.timings["verify"],
        "resume_s": result.timings["resume"],
        "steps_s": result.timings,
        "state_rows": result.verification.state_rows,
        "verified": result.verification.ok,
        **(_precopy_figures(result) if strategy == "precopy" else {}),
    }


def _precopy_figures(result: Reconfiguration) -> dict[str, Any]:
    """What the precopy did before the pause (copy, repartition, catch-up rounds) and what was left for it."""
    prepared, migrated = result.prepared.precopy or {}, result.migrated
    fell_back = prepared.get("failed") or migrated.fell_back
    if fell_back:  # the native migration ran in the pause instead: its figures are what the change cost
        return {
            "fell_back": fell_back,
            "prepare_s": prepared.get("seconds", 0.0),
            "replayed_in_pause": 0,
            "unmergeable": prepared.get("unmergeable"),
        }
    return {
        "prepare_s": prepared["seconds"],
        "copy_s": prepared["copy_s"],
        "rounds": prepared["rounds"],
        "verified_before_pause": prepared["verified"] is not None,
        "replayed_in_pause": migrated.replayed_batches,
        "replay_s": [[r["seconds"], r["batch_s"]] for r in migrated.replays],
        "merged_runs": sum(len(r.get("merged") or []) > 1 for r in prepared.get("replays", []) + migrated.replays),
        "pause_checked": "whole state" if result.verification.delta_batches is None else "replayed batches' counts",
    }


def run_size(
    keys: int, home: Path, steps: list[tuple[str, int]], trigger_s: float = TRIGGER_S
) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """Load a stream with ``keys`` state keys; ``steps`` (native 4 -> 8, precopy 8 -> 6, replay 6 -> 4); oracle
    check."""
    history = math.ceil(keys * HISTORY_WORDS_PER_KEY / WORDS_PER_SENTENCE)
    # The replay rebuilds state from every batch: the offset log must keep them all (Spark keeps 100 by default).
    spec = bundled_spec(
        f"bench-{keys}",
        "wordcount",
        master="local[2]",
        rate=STEADY_SENTENCES_PER_S,
        vocabulary=keys,
        words_per_sentence=WORDS_PER_SENTENCE,
        source_partitions=2,
        state_partitions=4,
        trigger_interval_s=trigger_s,
        max_per_trigger=LOAD_BATCH_SENTENCES,
        spark_conf={"spark.sql.streaming.minBatchesToRetain": "100000"},
    )
    paths = StreamPaths(home, spec.name)
    paths.create()
    anchor = pacing_anchor(paths.work, STEADY_SENTENCES_PER_S)
    (paths.work / "pacing.json").write_text(
        json.dumps({**anchor.__dict__, "start_index": history})
    )  # the history is there now
    runtime = StreamRuntime(spec, paths)
    ledger = AuditLedger(default_ledger_url(home))
    try:
        runtime.start()
        started = time.monotonic()
        wait_caught_up(runtime, history)
        print(
            f"{keys:,} keys: history of {history:,} sentences loaded in {time.monotonic() - started:.0f} s", flush=True
        )
        figures = {}
        for strategy, partitions in steps:
            figures[strategy] = reconfigure(runtime, ledger, strategy, partitions)
            print(f"  {strategy}: {figures[strategy]}", flush=True)
            time.sleep(3 * trigger_s)
        runtime.stop_at_batch_boundary()
        comparison = check_stream_output(runtime.spark, home, runtime.spec)
        if not ledger.verify().ok:
            raise RuntimeError("the audit ledger's chain is broken")
    finally:
        runtime.shutdown(timeout_s=120)
    return figures, {"lost": comparison.lost, "duplicated": comparison.duplicated, "rows": comparison.expected_rows}


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(k) for k in s.split(",")],
        help="state sizes in keys, comma-separated (default: 10k, 100k and 1M; --quick: 10k and 100k)",
    )
    parser.add_argument(
        "--strategies",
        type=lambda s: s.split(","),
        default=[strategy for strategy, _ in STEPS],
        help="which reconfigurations to run, in their order (default: native,precopy,replay)",
    )
    parser.add_argument(
        "--trigger-s",
        type=lambda s: [float(t) for t in s.split(",")],
        help=f"the stream's trigger intervals, comma-separated, each run over every size (default {TRIGGER_S:g} s): "
        "a precopy pays where its replays outrun the stream; precopy_by_trigger counts where it ran and fell back",
    )


def _run_trigger(trigger_s: float, sizes: list[int], steps: list[tuple[str, int]]) -> dict[str, Any]:
    """Every size at one trigger interval: the figures per strategy and size, correctness, and how often the precopy
    ran or fell back."""
    result: dict[str, Any] = {
        "trigger_s": trigger_s,
        **{strategy: {} for strategy, _ in steps},
        "lost": 0,
        "duplicated": 0,
    }
    with tempfile.TemporaryDirectory(prefix="reconf-bench-") as tmp:
        for keys in sizes:
            figures, correctness = run_size(keys, Path(tmp), steps, trigger_s)
            for strategy, row in figures.items():
                result[strategy][str(keys)] = row
            result["lost"] += correctness["lost"]
            result["duplicated"] += correctness["duplicated"]
            print(f"  trigger {trigger_s:g} s, output vs oracle: {correctness}", flush=True)
    for baseline in ("native", "precopy"):
        if baseline in result and "replay" in result:
            result[f"max_latency_ratio_replay_over_{baseline}"] = {
                k: round(result["replay"][k]["max_latency_s"] / max(result[baseline][k]["max_latency_s"], 1e-9), 2)
                for k in result[baseline]
            }
    if "precopy" in result:
        result["precopy_fell_back"] = sum("fell_back" in row for row in result["precopy"].values())
        result["precopy_ran"] = len(result["precopy"]) - result["precopy_fell_back"]
        smallest, largest = str(sizes[0]), str(sizes[-1])
        result["precopy_downtime_ratio_largest_over_smallest"] = round(
            result["precopy"][largest]["downtime_s"] / max(result["precopy"][smallest]["downtime_s"], 1e-9), 2
        )
    return result


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], _options)
    unknown = sorted(set(args.strategies) - {strategy for strategy, _ in STEPS})
    if unknown:
        raise SystemExit(f"unknown strategies {unknown}; use some of {[strategy for strategy, _ in STEPS]}")
    steps = [(strategy, partitions) for strategy, partitions in STEPS if strategy in args.strategies]
    logging.getLogger("py4j").setLevel(logging.WARNING)
    started = time.monotonic()
    sizes = args.sizes or ([10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000])
    triggers = args.trigger_s or [TRIGGER_S]
    runs = [_run_trigger(trigger_s, sizes, steps) for trigger_s in triggers]
    result: dict[str, Any] = {"benchmark": "reconfiguration", "mode": "quick" if args.quick else "full"}
    if len(runs) == 1:
        result.update(runs[0])
    else:
        result.update({"triggers": runs, "lost": sum(r["lost"] for r in runs)})
        result["duplicated"] = sum(r["duplicated"] for r in runs)
    if any(strategy == "precopy" for strategy, _ in steps):
        result["precopy_by_trigger"] = {
            f"{run['trigger_s']:g}": {"ran": run["precopy_ran"], "fell_back": run["precopy_fell_back"]} for run in runs
        }
    result["wall_s"] = round(time.monotonic() - started, 1)
    emit(result)


if __name__ == "__main__":
    main()
