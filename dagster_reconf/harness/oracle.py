"""A stopped stream's output checked by its definition's oracle, in a process of its own.

``python -m dagster_reconf.harness.oracle --home HOME --stream NAME`` prints the :class:`OutputComparison` as one JSON
line. Why a process: Hadoop finds a storage connector (S3A's jars) on the JVM's class path only, fixed when the JVM
starts, so an oracle that reads a stream's output from an object store needs a JVM started with the stream's
``spark_conf``; a caller whose JVM is already up (a test process) asks this one instead.

The process is bounded, and says on stderr what it is doing (each Spark stage it runs, with its tasks done), so an
oracle that runs out of time fails with where it was (a scan of 833 input files at 412 of them), not with a caller's
timeout dump.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from dagster_reconf.core.definition import OutputComparison, load_definition
from dagster_reconf.core.process.process_tree import terminate_process_tree
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.paths import StreamPaths

__all__ = ["OracleTimeout", "check_output", "check_output_in_process", "check_with_oracle"]

ORACLE_TIMEOUT_S = 240.0  # the batch job over a test's or a benchmark's whole input: about a minute on S3
REPORT_EVERY_S = 5.0
PROGRESS_PREFIX = "oracle:"


class OracleTimeout(TimeoutError):
    """The oracle's process ran past its bound; the message says what it was doing then."""


def check_with_oracle(oracle: Any, home: Path, spec: StreamSpec, progress: TextIO | None = None) -> OutputComparison:
    """The stopped stream's output checked by ``oracle``, in a helper SparkSession of this process with the stream's
    own Spark settings (the connector of a storage it writes to); ``progress``: where each running stage is reported
    every few seconds."""
    from dagster_reconf.core.spark.session import helper_session

    spark = helper_session("reconf-oracle", spark_conf=spec.spark_conf)
    try:
        with _stages_reported(spark.sparkContext, progress, spec.name):
            return oracle(spark, home, spec)
    finally:
        spark.stop()


def check_output(home: Path, name: str, progress: TextIO | None = None) -> OutputComparison:
    """The output of stream ``name`` under ``home`` (its spec in force there) against its definition's oracle."""
    spec = StreamSpec.parse(json.loads(StreamPaths(home, name).spec.read_text()))
    oracle = load_definition(str(spec.entrypoint)).oracle
    if oracle is None:
        raise ValueError(f"stream {name!r} ({spec.entrypoint}) has no oracle to check its output with")
    return check_with_oracle(oracle, home, spec, progress)


def check_output_in_process(
    home: Path, name: str, env: dict[str, str] | None = None, timeout_s: float = ORACLE_TIMEOUT_S
) -> OutputComparison:
    """:func:`check_output` in a new Python process (``env``: its environment, e.g. the storage's credentials).

    Raises:
        OracleTimeout: it ran past ``timeout_s``; its process tree is ended, and the message gives its last progress.
        RuntimeError: it failed; the message gives the end of its output.
    """
    with tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", __name__, "--home", str(home), "--stream", name],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            start_new_session=True,  # its JVM and Python workers are found and ended with it
        )
        try:
            stdout, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            terminate_process_tree(process.pid, grace_s=5.0)
            process.communicate()
            err.seek(0)
            raise OracleTimeout(
                f"the oracle of {name!r} ran past its {timeout_s:.0f} s; {_last_progress(err.read())}"
            ) from None
        err.seek(0)
        stderr = err.read()
    if process.returncode != 0:
        raise RuntimeError(f"the oracle of {name!r} failed (exit {process.returncode}): {stderr[-3000:]}")
    return OutputComparison(**json.loads(stdout.strip().splitlines()[-1]))


def _last_progress(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith(PROGRESS_PREFIX)]
    if not lines:
        return f"it reported no Spark stage (its JVM had not started one); its output ends: {stderr[-2000:]!r}"
    return f"it was at: {lines[-1][len(PROGRESS_PREFIX) :].strip()}"


@contextmanager
def _stages_reported(context: Any, out: TextIO | None, name: str) -> Iterator[None]:
    """Every ``REPORT_EVERY_S`` while the block runs, one line on ``out`` per active stage of ``context`` (a
    SparkContext): its name and its tasks done of all."""
    if out is None:
        yield
        return
    stop = threading.Event()
    tracker = context.statusTracker()
    started = time.monotonic()

    def report() -> None:
        while not stop.wait(REPORT_EVERY_S):
            for stage_id in tracker.getActiveStageIds():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    print(
                        f"{PROGRESS_PREFIX} {name!r} after {time.monotonic() - started:.0f} s: stage {stage_id} "
                        f"({stage.name}) {stage.numCompletedTasks}/{stage.numTasks} tasks done, "
                        f"{stage.numActiveTasks} running",
                        file=out,
                        flush=True,
                    )

    thread = threading.Thread(target=report, name="oracle-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--stream", required=True)
    args = parser.parse_args()
    print(f"{PROGRESS_PREFIX} {args.stream!r}: starting its Spark session", file=sys.stderr, flush=True)
    print(json.dumps(asdict(check_output(args.home.resolve(), args.stream, progress=sys.stderr))))


if __name__ == "__main__":
    main()
