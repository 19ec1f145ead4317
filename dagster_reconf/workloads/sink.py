"""An exactly-once file sink for ``foreachBatch``, and its reader.

Each micro-batch is written to ``<output>/batch=<id>/`` with ``mode("overwrite")``.
Spark writes ``_SUCCESS`` last, and readers ignore directories without it, so:

* a batch that failed half-way is invisible;
* a batch replayed after a restart (same id, same offsets, same state version)
  overwrites its earlier attempt with identical rows.

Together with the checkpoint that is exactly-once output, and it works on any
Hadoop-compatible path because the write is Spark's own. (A replay migration keeps the
batch ids, so a new checkpoint generation writes on where the old one stopped.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

__all__ = ["BatchFileSink", "read_sink"]

_BATCH_DIR = re.compile(r"^batch=(\d+)$")


class BatchFileSink:
    """``foreachBatch`` function writing each batch idempotently under ``output``."""

    def __init__(self, output: Path | str) -> None:
        self.output = str(output).rstrip("/")

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(f"{self.output}/batch={batch_id:012d}")


def read_sink(output: Path | str) -> pd.DataFrame:
    """All committed batches under a local ``output`` as one frame, in batch order (column ``batch_id``)."""
    frames = []
    root = Path(output)
    for directory in sorted(root.iterdir()) if root.is_dir() else []:
        match = _BATCH_DIR.match(directory.name)
        if not match or not (directory / "_SUCCESS").exists():
            continue
        files = sorted(str(f) for f in directory.glob("*.parquet"))
        if not files:
            continue
        frame = pq.ParquetDataset(files, partitioning=None).read().to_pandas()
        frame["batch_id"] = int(match.group(1))
        frames.append(frame)
    if not frames:
        return pd.DataFrame({"batch_id": pd.Series(dtype="int64")})
    return pd.concat(frames, ignore_index=True)
