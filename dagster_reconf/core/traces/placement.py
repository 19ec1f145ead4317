"""Where tasks ran, which the event log does not say: each task on a free core slot of its executor by launch time
(as the scheduler places them), and each stage's depth below its job's final stage. Compiled or vectorized: they run
over every task of a log."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["place_slots", "stage_depths"]


def stage_depths(
    job_of: np.ndarray, stage_ids: np.ndarray, parent_row: np.ndarray, parent_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each stage row's distance below its job's final (highest-numbered) stage along parent edges, and the rows
    the final stage does not reach.

    ``job_of``/``stage_ids``: per stage row; ``parent_row``/``parent_ids``: per parent edge, the stage row it
    leaves and the parent stage's id. A parent outside the job leads nowhere (as a missing stage info does).
    """
    lo, span = int(stage_ids.min()), int(stage_ids.max() - stage_ids.min()) + 1
    key = job_of * span + (stage_ids - lo)  # unique per (job, stage)
    order = np.argsort(key, kind="stable")
    final = np.zeros(len(key), dtype=bool)
    final[order[np.r_[job_of[order][1:] != job_of[order][:-1], True]]] = True  # each job's highest stage id
    in_range = (parent_ids >= lo) & (parent_ids - lo < span)
    wanted = job_of[parent_row] * span + (parent_ids - lo)
    at = np.minimum(np.searchsorted(key[order], wanted), len(order) - 1)
    inside = in_range & (key[order][at] == wanted)
    child, parent = parent_row[inside], order[at[inside]]
    depth = np.where(final, 0.0, np.inf)
    while True:  # breadth-first from each final stage: one level per pass
        relaxed = depth.copy()
        np.minimum.at(relaxed, parent, depth[child] + 1)
        if np.array_equal(relaxed, depth):
            break
        depth = relaxed
    unreached = np.flatnonzero(np.isinf(depth))
    return np.where(np.isinf(depth), -1, depth).astype(np.int64), unreached


@numba.njit(cache=True)
def place_slots(order, executor, launch, finish, free_at, used, cores):  # pragma: no cover - compiled
    """The slot of each task (see ``WorkerSlots.place`` in worker_slots.py); ``early`` is -1 when ``free_at`` ran out
    of room."""
    slots = np.empty(len(order), dtype=np.int64)
    early = 0
    for i in order:
        e = executor[i]
        placed = -1
        for k in range(used[e]):
            if free_at[e, k] <= launch[i]:
                free_at[e, k] = finish[i]
                placed = k
                break
        if placed < 0:
            if cores[e] >= 0 and used[e] >= cores[e] and used[e] > 0:
                placed = int(np.argmin(free_at[e, : used[e]]))
                free_at[e, placed] = max(free_at[e, placed], finish[i])
                early += 1
            elif used[e] == free_at.shape[1]:
                return slots, -1
            else:
                placed = used[e]
                free_at[e, placed] = finish[i]
                used[e] += 1
        slots[i] = placed
    return slots, early
