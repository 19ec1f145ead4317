"""The streams this code location manages: the bundled workloads, as a user declares their own.

Locally they run on ``local[2]`` with checkpoints and event logs under the runtime home.
In production (``DAGSTER_RECONF_ENV=production``) the same streams run on the cluster
named by ``RECONF_SPARK_MASTER``, with checkpoints and event logs under ``RECONF_STORAGE``
(any Hadoop-compatible URL: ``hdfs://``, ``s3a://``, ``gs://``, ``abfs://``, ``file://``);
``reconf stream start NAME --spec-file`` takes a spec from :func:`streams_for_env`.
"""

from __future__ import annotations

import os

from dagster_reconf import StreamSpec
from dagster_reconf.workloads.streams import bundled_spec

BUNDLED_STREAMS: list[StreamSpec] = [
    bundled_spec("nexmark-q5", "q5", rate=3000, source_partitions=2, state_partitions=4),
    bundled_spec("wordcount", "wordcount", rate=2000, source_partitions=2, state_partitions=4),
]

STREAM_NAMES: list[str] = [spec.name for spec in BUNDLED_STREAMS]

PRODUCTION_SETTINGS = {
    "master": "RECONF_SPARK_MASTER",
    "storage": "RECONF_STORAGE",
}  # spec field -> environment variable


def streams_for_env(env: str | None = None) -> list[StreamSpec]:
    """The bundled streams for ``env`` (default ``$DAGSTER_RECONF_ENV`` or ``local``), validated."""
    name = env or os.environ.get("DAGSTER_RECONF_ENV", "local")
    if name == "local":
        return BUNDLED_STREAMS
    if name != "production":
        raise ValueError(f"DAGSTER_RECONF_ENV={name!r} is not a known environment; use local or production")
    missing = [var for var in PRODUCTION_SETTINGS.values() if not os.environ.get(var)]
    if missing:
        raise ValueError(
            f"production streams need {', '.join(missing)}: e.g. RECONF_SPARK_MASTER=spark://host:7077 "
            "RECONF_STORAGE=hdfs://namenode:8020/reconf"
        )
    changes = {field: os.environ[var] for field, var in PRODUCTION_SETTINGS.items()}
    return [spec.with_changes(changes) for spec in BUNDLED_STREAMS]


if __name__ == "__main__":  # python -m resources.streams NAME: the spec as JSON, for `reconf stream start --spec-file`
    import sys

    specs = {spec.name: spec for spec in streams_for_env()}
    if len(sys.argv) != 2 or sys.argv[1] not in specs:
        raise SystemExit(f"usage: python -m resources.streams NAME (one of {', '.join(specs)})")
    print(specs[sys.argv[1]].model_dump_json(indent=2))
