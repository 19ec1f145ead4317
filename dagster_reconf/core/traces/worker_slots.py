"""Who ran each task and who sent it its shuffle data: the workers (executor core slots) a trace names.

The event log names a task's executor, not the core it ran on, nor the tasks its shuffle read fetched from. The
critical path needs both: :class:`WorkerSlots` places each task on a slot of its executor (as the scheduler does) and
codes each worker once; :class:`ShuffleSenders` pairs a task with the finished tasks of its stage's parents.
Both carry over incremental reads (their state is JSON-able).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dagster_reconf.core.traces.placement import place_slots

__all__ = ["ShuffleSenders", "WorkerSlots", "parent_stages"]

_SENDER_COLUMNS = ["stage_id", "src_worker", "src_end"]


@dataclass
class WorkerSlots:
    """Each worker's code (its index in :attr:`names`), and when each executor's slots come free."""

    names: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    free_at: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def code(self, name: str) -> int:
        code = self.index.get(name)
        if code is None:
            code = self.index[name] = len(self.names)
            self.names.append(name)
        return code

    def names_of(self, codes: np.ndarray) -> np.ndarray:
        return np.array(self.names, dtype=object)[codes] if len(codes) else np.zeros(0, dtype=object)

    def place(
        self, executors: np.ndarray, launch: np.ndarray, finish: np.ndarray, executor_cores: dict[str, int]
    ) -> tuple[np.ndarray, int]:
        """Worker codes for a batch of tasks, each on the first slot of its executor free at launch; and how many
        launched before their slot's previous task was reported finished.

        Tasks are placed in launch order. Finish times are stamped by the driver, a little after the executor freed
        the core, so a task can launch "before" its slot's previous task finished: then the slot freed earliest is
        used (counted). Slots beyond the executor's cores are added only when its core count is unknown.
        """
        codes, names = pd.factorize(executors.astype(str))
        used = np.array([len(self.free_at[n]) for n in names], dtype=np.int64)
        cores = np.array([executor_cores.get(n, -1) for n in names], dtype=np.int64)
        capacity = int(max(used.max(), cores.max(), 1)) + 16
        while True:
            free_at = np.full((len(names), capacity), np.inf)
            for e, name in enumerate(names):
                free_at[e, : used[e]] = self.free_at[name]
            now_used = used.copy()
            order = np.argsort(launch, kind="stable")
            slots, early = place_slots(order, codes.astype(np.int64), launch, finish, free_at, now_used, cores)
            if early >= 0:
                break
            capacity *= 2  # an executor of unknown cores ran more tasks at once than there was room for
        for e, name in enumerate(names):
            self.free_at[name] = free_at[e, : now_used[e]].tolist()
        lookup = np.full((len(names), int(now_used.max())), -1, dtype=np.int64)
        for e, name in enumerate(names):
            for k in range(now_used[e]):
                lookup[e, k] = self.code(f"{name}/{k}")
        return lookup[codes, slots], int(early)


def parent_stages(
    tasks: np.ndarray, stage_ids: np.ndarray, parents_of: Callable[[int], list[int]]
) -> tuple[np.ndarray, np.ndarray]:
    """Each (task, parent stage of its stage) pair: the task repeated once per parent."""
    keys, stage_of_task = np.unique(stage_ids[tasks], return_inverse=True)
    parents = [parents_of(int(k)) for k in keys]
    counts = np.array([len(p) for p in parents], dtype=np.int64)
    flat = np.array([p for ps in parents for p in ps], dtype=np.int64)
    per_task = counts[stage_of_task]
    first = np.repeat((np.cumsum(counts) - counts)[stage_of_task], per_task)
    within = np.arange(int(per_task.sum())) - np.repeat(np.cumsum(per_task) - per_task, per_task)
    return np.repeat(tasks, per_task), flat[first + within]


@dataclass
class ShuffleSenders:
    """The successful tasks seen so far, by stage: where a later stage's shuffle read fetched from."""

    frame: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=_SENDER_COLUMNS))

    def messages(
        self,
        slots: WorkerSlots,
        parents_of: Callable[[int], list[int]],
        stage_ids: np.ndarray,
        ok: np.ndarray,
        workers: np.ndarray,
        fetch_start: np.ndarray,
        fetch_end: np.ndarray,
        finish: np.ndarray,
    ) -> tuple[np.ndarray, ...]:
        """Remember the successful (``ok``) tasks; return one message per (parent-stage task, child task), in flight
        while the child fetches: the child task of each, its sender's worker code, start and end."""
        produced = pd.DataFrame(
            {"stage_id": stage_ids[ok], "src_worker": slots.names_of(workers[ok]), "src_end": finish[ok]}
        )
        senders = self.frame = pd.concat([self.frame, produced], ignore_index=True) if len(self.frame) else produced
        child, parent = parent_stages(np.flatnonzero(ok), stage_ids, parents_of)
        none = np.zeros(0, dtype=np.int64)
        if not len(child) or senders.empty:
            return none, none, np.zeros(0), np.zeros(0)
        pairs = pd.DataFrame({"child": child, "stage_id": parent}).merge(senders, on="stage_id")
        child = pairs["child"].to_numpy()
        pairs = pairs[pairs["src_end"].to_numpy() <= fetch_end[child]]
        child = pairs["child"].to_numpy()
        codes, names = pd.factorize(pairs["src_worker"])
        sender = np.array([slots.code(n) for n in names], dtype=np.int64)[codes] if len(names) else none
        return child, sender, np.maximum(pairs["src_end"].to_numpy(), fetch_start[child]), fetch_end[child]

    def state(self, stages: list[int]) -> dict[str, list[Any]]:
        """The senders of ``stages`` (the ones kept), JSON-able."""
        return self.frame[self.frame["stage_id"].isin(stages)].to_dict(orient="list")

    @classmethod
    def from_state(cls, state: dict[str, list[Any]]) -> ShuffleSenders:
        frame = pd.DataFrame(state, columns=_SENDER_COLUMNS)
        return cls(frame.astype({"stage_id": "int64", "src_end": "float64"}))
