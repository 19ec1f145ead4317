"""The record of a standalone cluster started by ``reconf cluster start``: ``<home>/cluster/cluster.json``.

Written by the launcher, read by the launcher (to stop it) and by drivers (to find the master's UI):
it lives with the stream's files so that reading it never imports the launcher.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ClusterInfo", "cluster_info", "cluster_record_file"]


@dataclass
class ClusterInfo:
    """A running standalone cluster."""

    master_url: str
    master_ui: str
    master_pid: int
    worker_pids: list[int] = field(default_factory=list)
    directory: str = ""


def cluster_record_file(home: Path) -> Path:
    """Where the cluster of runtime home ``home`` is recorded."""
    return home / "cluster" / "cluster.json"


def cluster_info(home: Path) -> ClusterInfo | None:
    """The cluster recorded under runtime home ``home`` if its master process still runs."""
    path = cluster_record_file(home)
    if not path.exists():
        return None
    info = ClusterInfo(**json.loads(path.read_text()))
    try:
        os.kill(info.master_pid, 0)
    except ProcessLookupError:
        return None
    return info
