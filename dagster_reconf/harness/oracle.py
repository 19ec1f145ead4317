"""A stopped stream's output checked by its definition's oracle, in a process of its own.

``python -m dagster_reconf.harness.oracle --home HOME --stream NAME`` prints the :class:`OutputComparison` as one JSON
line. Why a process: Hadoop finds a storage connector (S3A's jars) on the JVM's class path only, fixed when the JVM
starts, so an oracle that reads a stream's output from an object store needs a JVM started with the stream's
``spark_conf``; a caller whose JVM is already up (a test process) asks this one instead.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dagster_reconf.core.definition import OutputComparison, load_definition
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.paths import StreamPaths

__all__ = ["check_output", "check_output_in_process", "check_with_oracle"]


def check_with_oracle(oracle: Any, home: Path, spec: StreamSpec) -> OutputComparison:
    """The stopped stream's output checked by ``oracle``, in a helper SparkSession of this process with the stream's
    own Spark settings (the connector of a storage it writes to)."""
    from dagster_reconf.core.spark.session import helper_session

    spark = helper_session("reconf-oracle", spark_conf=spec.spark_conf)
    try:
        return oracle(spark, home, spec)
    finally:
        spark.stop()


def check_output(home: Path, name: str) -> OutputComparison:
    """The output of stream ``name`` under ``home`` (its spec in force there) against its definition's oracle."""
    spec = StreamSpec.parse(json.loads(StreamPaths(home, name).spec.read_text()))
    oracle = load_definition(str(spec.entrypoint)).oracle
    if oracle is None:
        raise ValueError(f"stream {name!r} ({spec.entrypoint}) has no oracle to check its output with")
    return check_with_oracle(oracle, home, spec)


def check_output_in_process(
    home: Path, name: str, env: dict[str, str] | None = None, timeout_s: float = 600
) -> OutputComparison:
    """:func:`check_output` in a new Python process (``env``: its environment, e.g. the storage's credentials)."""
    done = subprocess.run(
        [sys.executable, "-m", __name__, "--home", str(home), "--stream", name],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the oracle of {name!r} failed (exit {done.returncode}): {done.stderr[-3000:]}")
    return OutputComparison(**json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--stream", required=True)
    args = parser.parse_args()
    print(json.dumps(asdict(check_output(args.home.resolve(), args.stream))))


if __name__ == "__main__":
    main()
