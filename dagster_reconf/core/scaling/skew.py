"""Key skew: a stage whose time is one hot partition's, which more cores cannot shorten.

DS2 holds instead of scaling such a stream and says which operator is hot and by how much; a hot task of a few
milliseconds is no reason to stop scaling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from dagster_reconf.core.scaling.profile import StreamProfile

__all__ = ["SKEW_MIN_EXCESS_MS", "hot_task_excess_ms", "skewed_operators"]

SKEW_MIN_EXCESS_MS = 100.0  # a hot task that finishes less than this after the median one costs a batch nothing


def hot_task_excess_ms(profile: StreamProfile) -> pd.Series:
    """Per operator, how much longer its slowest task runs than its median one, per batch (ms): the median task
    taken as the stage's mean (its work per batch over its tasks)."""
    ops = profile.operators
    mean_task = ops["work_ms_per_event"] * profile.events_per_batch / ops["tasks"].clip(lower=1)
    return ((ops["skew"] - 1.0).clip(lower=0.0) * mean_task).set_axis(ops["operator"])


def skewed_operators(
    profile: StreamProfile, threshold: float = 3.0, min_share: float = 0.3, min_excess_ms: float = SKEW_MIN_EXCESS_MS
) -> list[str]:
    """Operators where one task does ``threshold`` times the median task's work, that dominate the work, and whose
    hot task adds at least ``min_excess_ms`` (and a tenth of the batch) to every batch.

    More cores cannot shorten a stage whose time is one hot partition's; a hot task of a few milliseconds is no
    reason to stop scaling.
    """
    ops = profile.operators
    share = ops["work_ms_per_event"] / max(profile.work_ms_per_event, 1e-12)
    excess = hot_task_excess_ms(profile).to_numpy()
    floor = max(min_excess_ms, 0.1 * profile.batch_ms)
    hot = (ops["skew"] >= threshold) & (share >= min_share) & (ops["tasks"] > 1) & (excess >= floor)
    return ops.loc[hot, "operator"].tolist()
