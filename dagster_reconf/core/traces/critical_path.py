"""Program Activity Graph and Critical Participation (SnailTrail), per snapshot window.

Graph: every worker has a timeline from the window start ``ts`` to its end ``te``, cut
into edges at activity boundaries and at the send and arrival times of messages.
Timeline edges are the activity covering them, or ``waiting`` where none does; message
edges join the sender's node to the receiver's. Activities and messages crossing the
window edges are clipped to it (a message in flight at ``ts`` leaves from its sender's
start anchor); messages entirely outside are left out and counted.

The driver's own timeline is derived: when no task is in flight the driver does
coordinator work (``unknown`` to the trace: planning, offset and state commits, the
trigger wait); a segment that ends in launching a task is ``scheduling`` (the driver
relays a result into the next launch); otherwise it waits for results (``waiting``). So
a stage barrier routes every path through the last task's result message.

Critical Participation: waiting edges carry no paths. For every other edge ``e``,
``paths(e) = F(src) * B(dst)`` (forward counts from the start anchors, backward counts
from the end anchors, one topological pass each) and
``CP(e) = w_e * paths(e) / (N * (te - ts))`` with ``N`` the number of start-to-end
paths. Each path spans the window exactly once, so CP sums to 1; that is checked on
every snapshot (:class:`CPInvariantError` if not). Counts grow like ``k**r`` (k workers,
r all-to-all rounds), so the passes use extended-exponent floats (float64 mantissa,
int64 exponent; compiled with numba): no overflow, and relative rounding of about 1e-16
per addition at any magnitude. The invariant check is what verifies that arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import pandas as pd
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from dagster_reconf.core.errors import ReconfError
from dagster_reconf.core.traces.event_schema import DRIVER

__all__ = ["ActivityGraph", "CPInvariantError", "Snapshot", "build_graph", "critical_participation", "snapshot"]

CP_SUM_TOLERANCE = 1e-9
_NO_ACTIVITY = -1  # a waiting edge (no activity row behind it)
_DRIVER_WORK = -2  # driver time derived here (no row in the activity table)


class CPInvariantError(ReconfError, ArithmeticError):
    """CP over a snapshot did not sum to 1: the graph or the arithmetic is wrong."""


@dataclass
class ActivityGraph:
    """A snapshot's graph as arrays (edges ``src -> dst`` over nodes ``0..n_nodes-1``)."""

    window_start: float
    window_end: float
    node_worker: np.ndarray  # worker name per node, before instants are merged
    node_time: np.ndarray  # float64 per node, before instants are merged
    start_anchors: np.ndarray  # node ids
    end_anchors: np.ndarray
    src: np.ndarray  # int64 per edge
    dst: np.ndarray
    weight: np.ndarray  # float64 duration per edge (ms)
    activity: np.ndarray  # row of the activity table per edge, -1 for waiting
    edge_type: np.ndarray  # activity type per edge (str)
    dropped_messages: int = 0
    edge_worker: np.ndarray | None = None  # worker an edge leaves from (timeline worker or sender)
    edge_dst_worker: np.ndarray | None = None  # worker an edge arrives at
    _order: np.ndarray | None = None

    @property
    def carries_paths(self) -> np.ndarray:
        """Waiting edges and edges inside a merged instant (self-loops) carry no paths."""
        return (self.edge_type != "waiting") & (self.src != self.dst)

    def topological_order(self) -> np.ndarray:
        """Nodes in topological order over path-carrying edges (computed once per graph)."""
        if self._order is None:
            carry = self.carries_paths
            order = _topological_order(len(self.node_time), self.src[carry], self.dst[carry])
            if (order < 0).any():
                raise CPInvariantError("the activity graph has a cycle (messages arriving before they are sent?)")
            self._order = order
        return self._order


def _driver_activities(
    worker: np.ndarray, start: np.ndarray, end: np.ndarray, task: np.ndarray, driver: int, ts: float, te: float
) -> tuple[np.ndarray, np.ndarray]:
    """Coordinator time on the driver: the parts of the window with no task in flight (start, end arrays).

    ``task`` identifies each timeline row's task attempt (rows of one task share it).
    """
    tasks = worker != driver
    if tasks.any():
        keys, inverse = np.unique(task[tasks], return_inverse=True)
        starts = np.full(len(keys), np.inf)
        ends = np.full(len(keys), -np.inf)
        np.minimum.at(starts, inverse, start[tasks])
        np.maximum.at(ends, inverse, end[tasks])
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        # merge overlapping in-flight intervals: a new run starts where start > running max end
        running_end = np.maximum.accumulate(ends)
        new_run = np.r_[True, starts[1:] > running_end[:-1]]
        busy_starts = starts[new_run]
        busy_ends = np.maximum.reduceat(ends, np.flatnonzero(new_run))
    else:
        busy_starts, busy_ends = np.array([]), np.array([])
    gap_starts = np.clip(np.r_[ts, busy_ends], ts, te)
    gap_ends = np.clip(np.r_[busy_starts, te], ts, te)
    keep = gap_ends > gap_starts
    return gap_starts[keep], gap_ends[keep]


def _one_task_per_slot(
    worker: np.ndarray, start: np.ndarray, end: np.ndarray, task_key: np.ndarray, driver: int
) -> tuple[np.ndarray, np.ndarray]:
    """Rows' (start, end) with each executor slot's tasks made sequential.

    The driver stamps a task's finish when its result arrives, a little after the slot
    freed; Spark may launch the next task on that slot first, and the normalizer places
    it there (counted in ``skipped``). A slot runs one task at a time: the earlier task's
    rows end where the next task starts, and rows of it that start later are emptied
    (start = end), so the timeline never holds two activities at once.
    """
    slot_rows = worker != driver
    if not slot_rows.any():
        return start, end
    slot, rows_start = worker[slot_rows].astype(np.int64), start[slot_rows]
    codes, _ = pd.factorize(slot * (1 << 40) + task_key[slot_rows])  # one code per (slot, task)
    by_code = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.r_[True, codes[by_code][1:] != codes[by_code][:-1]])
    first = np.minimum.reduceat(rows_start[by_code], bounds)  # each task's first start, by code
    task_slot = slot[by_code][bounds]
    order = np.lexsort((first, task_slot))  # each slot's tasks in start order
    following = np.r_[first[order][1:], np.inf]
    following[np.r_[task_slot[order][1:] != task_slot[order][:-1], True]] = np.inf  # a slot's last task
    next_start = np.empty(len(first))
    next_start[order] = following
    cut = next_start[codes]
    start, end = start.copy(), end.copy()
    start[slot_rows] = np.minimum(start[slot_rows], cut)
    end[slot_rows] = np.minimum(end[slot_rows], cut)
    return start, end


class _Nodes:
    """Graph nodes: distinct (worker code, time) pairs sorted by worker then time, with exact lookups."""

    def __init__(self, worker: np.ndarray, time: np.ndarray, n_workers: int) -> None:
        order = np.lexsort((time, worker))
        worker, time = worker[order], time[order]
        distinct = np.r_[True, (worker[1:] != worker[:-1]) | (time[1:] != time[:-1])]
        self.worker, self.time = worker[distinct], time[distinct]
        self.block = np.searchsorted(self.worker, np.arange(n_workers + 1))  # nodes of worker w: block[w]:block[w+1]

    def ids(self, worker: np.ndarray, time: np.ndarray) -> np.ndarray:
        """Node id of each (worker, time) pair (every pair must be a node)."""
        out = np.empty(len(worker), dtype=np.int64)
        for w in np.unique(worker):
            mine = np.flatnonzero(worker == w)
            lo, hi = self.block[w], self.block[w + 1]
            out[mine] = lo + np.searchsorted(self.time[lo:hi], time[mine])
        return out


def build_graph(activities: pd.DataFrame, window_start: float, window_end: float) -> ActivityGraph:
    """The activity graph of ``activities`` (the normalized table) in ``[window_start, window_end)``.

    Workers are integer codes throughout (names only at the end): sorting and joining
    strings was most of the graph's construction time.
    """
    ts, te = float(window_start), float(window_end)
    if not te > ts:
        raise ValueError(f"snapshot window must have end > start, got [{ts}, {te})")
    n = len(activities)
    codes, names = pd.factorize(
        pd.concat(
            [activities["worker"], activities["src_worker"], activities["dst_worker"], pd.Series([DRIVER])],
            ignore_index=True,
        )
    )
    names = np.asarray(names, dtype=object)
    worker_of, src_of, dst_of = codes[:n], codes[n : 2 * n], codes[2 * n : 3 * n]
    driver = int(codes[-1])
    start_all = activities["start_ms"].to_numpy(dtype=np.float64)
    end_all = activities["end_ms"].to_numpy(dtype=np.float64)
    activity_all = activities["activity"].to_numpy(dtype=object)
    is_message = src_of >= 0

    # Timeline activities, one task at a time per slot, clipped to the window (those clipped to nothing are left out).
    rows = np.flatnonzero(~is_message)
    # A task attempt, within its application: a new SparkContext (a restart, a handover) numbers its tasks from 0 again.
    app, _ = pd.factorize(activities["app_id"].to_numpy(dtype=object)[rows], use_na_sentinel=False)
    task_key, _ = pd.factorize(
        app.astype(np.int64) * (1 << 42)
        + activities["task_id"].to_numpy(dtype=np.int64)[rows] * 1024
        + activities["attempt"].to_numpy(dtype=np.int64)[rows]
    )
    r_start, r_end = _one_task_per_slot(worker_of[rows], start_all[rows], end_all[rows], task_key, driver)
    t_start, t_end = np.maximum(r_start, ts), np.minimum(r_end, te)
    inside = t_end > t_start
    rows, t_start, t_end, task_key = rows[inside], t_start[inside], t_end[inside], task_key[inside]
    t_worker = worker_of[rows]
    d_start, d_end = _driver_activities(t_worker, t_start, t_end, task_key * 4096 + t_worker, driver, ts, te)
    t_worker = np.r_[t_worker, np.full(len(d_start), driver)]
    t_start, t_end = np.r_[t_start, d_start], np.r_[t_end, d_end]
    t_row = np.r_[rows, np.full(len(d_start), _DRIVER_WORK)]
    t_activity = np.r_[activity_all[rows], np.full(len(d_start), "unknown", dtype=object)]

    # Messages, clipped like activities: one in flight at ts leaves from the sender's start
    # anchor; one still in flight at te arrives at the receiver's end anchor. Messages
    # entirely outside the window, or that clipping shrinks to nothing, are left out.
    m_rows = np.flatnonzero(is_message)
    m_start, m_end = start_all[m_rows], end_all[m_rows]
    inside = (m_end >= m_start) & (m_start < te) & (m_end > ts)
    inside |= (m_start == m_end) & (m_start >= ts) & (m_start < te)
    dropped = int((~inside).sum())
    m_rows = m_rows[inside]
    m_start, m_end = np.maximum(m_start[inside], ts), np.minimum(m_end[inside], te)
    m_src, m_dst = src_of[m_rows], dst_of[m_rows]

    # Nodes: (worker, time) at anchors, activity boundaries and message endpoints.
    workers = np.unique(np.r_[t_worker, m_src, m_dst])
    nodes = _Nodes(
        np.r_[workers, workers, t_worker, t_worker, m_src, m_dst],
        np.r_[np.full(len(workers), ts), np.full(len(workers), te), t_start, t_end, m_start, m_end],
        len(names),
    )
    node_worker, node_time = nodes.worker, nodes.time

    # Timeline edges between consecutive nodes of the same worker, typed by the activity covering them.
    e_src = np.flatnonzero(node_worker[1:] == node_worker[:-1])
    e_dst = e_src + 1
    e_row = np.full(len(e_src), _NO_ACTIVITY, dtype=np.int64)
    e_type = np.full(len(e_src), "waiting", dtype=object)
    for w in np.unique(t_worker):
        mine = np.flatnonzero(t_worker == w)
        mine = mine[np.argsort(t_start[mine], kind="stable")]
        segments = e_src[node_worker[e_src] == w]
        latest = np.searchsorted(t_start[mine], node_time[segments], side="right") - 1  # last activity started by then
        found = latest >= 0
        covering = mine[latest[found]]
        covered = t_end[covering] > node_time[segments[found]]
        edge = np.searchsorted(e_src, segments[found][covered])
        e_row[edge] = t_row[covering[covered]]
        e_type[edge] = t_activity[covering[covered]]

    m_src_node = nodes.ids(m_src, m_start)
    m_dst_node = nodes.ids(m_dst, m_end)

    # A driver segment that ends in launching a task is driver work (it relays a result
    # into the next launch), even while other tasks are in flight.
    m_type = activity_all[m_rows]
    launches = np.zeros(len(node_time), dtype=bool)
    launches[m_src_node[(m_type == "control") & (m_src == driver)]] = True
    relay = (node_worker[e_src] == driver) & launches[e_dst] & (e_type == "waiting")
    e_type[relay] = "scheduling"
    e_row[relay] = _DRIVER_WORK

    src = np.r_[e_src, m_src_node].astype(np.int64)
    dst = np.r_[e_dst, m_dst_node].astype(np.int64)
    edge_type = np.r_[e_type, m_type]
    weight = node_time[dst] - node_time[src]
    node_of = _contract_instant_cycles(len(node_time), src, dst, (edge_type != "waiting") & (weight == 0))
    node_names = names[node_worker]
    return ActivityGraph(
        window_start=ts,
        window_end=te,
        node_worker=node_names,
        node_time=node_time,
        start_anchors=np.unique(node_of[node_time == ts]),
        end_anchors=np.unique(node_of[node_time == te]),
        src=node_of[src],
        dst=node_of[dst],
        weight=weight,
        activity=np.r_[e_row, m_rows].astype(np.int64),
        edge_type=edge_type,
        dropped_messages=dropped,
        edge_worker=node_names[src],
        edge_dst_worker=node_names[dst],
    )


def _contract_instant_cycles(n_nodes: int, src: np.ndarray, dst: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """Node ids after merging nodes joined by a cycle of zero-length edges.

    With millisecond timestamps, a result message and the next control message can
    happen in the same instant in opposite directions. Every other edge moves forward in
    time, so such instants are the only cycles; merging each into one node (paths move
    freely within an instant) makes the graph acyclic and leaves CP's sum unchanged,
    since the merged edges weigh nothing.
    """
    identity = np.arange(n_nodes, dtype=np.int64)
    if not zero.any():
        return identity
    adjacency = coo_matrix((np.ones(int(zero.sum())), (src[zero], dst[zero])), shape=(n_nodes, n_nodes)).tocsr()
    n_components, labels = connected_components(adjacency, directed=True, connection="strong")
    if n_components == n_nodes:
        return identity
    return labels.astype(np.int64)


@numba.njit(cache=True)
def _topological_order(n_nodes: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Kahn's algorithm over CSR adjacency; returns -1 entries if there is a cycle."""
    indegree = np.zeros(n_nodes, dtype=np.int64)
    for e in range(len(src)):
        indegree[dst[e]] += 1
    order_by_src = np.argsort(src, kind="mergesort")
    starts = np.searchsorted(src[order_by_src], np.arange(n_nodes + 1))
    queue = np.empty(n_nodes, dtype=np.int64)
    head, tail = 0, 0
    for v in range(n_nodes):
        if indegree[v] == 0:
            queue[tail] = v
            tail += 1
    while head < tail:
        v = queue[head]
        head += 1
        for k in range(starts[v], starts[v + 1]):
            w = dst[order_by_src[k]]
            indegree[w] -= 1
            if indegree[w] == 0:
                queue[tail] = w
                tail += 1
    if tail < n_nodes:
        queue[tail:] = -1
    return queue


@numba.njit(cache=True)
def _path_counts(order: np.ndarray, src: np.ndarray, dst: np.ndarray, sources: np.ndarray, n_nodes: int):
    """Paths from any of ``sources`` to every node, as extended-exponent floats.

    A count is ``mantissa * 2**exponent`` with the mantissa in [0.5, 1) (``frexp``):
    every addition rounds with relative error about 1e-16, whatever the magnitude, and
    counts like 8**400 never overflow. (Log space would lose absolute precision as the
    logs grow: measured 1.3e-9 drift in the CP sum at 1M activities.)
    """
    mantissa = np.zeros(n_nodes)
    exponent = np.zeros(n_nodes, dtype=np.int64)
    for s in sources:
        mantissa[s] = 0.5
        exponent[s] = 1
    order_by_dst = np.argsort(dst, kind="mergesort")
    starts = np.searchsorted(dst[order_by_dst], np.arange(n_nodes + 1))
    for v in order:
        m, e = mantissa[v], exponent[v]
        for k in range(starts[v], starts[v + 1]):
            u = src[order_by_dst[k]]
            mu, eu = mantissa[u], exponent[u]
            if mu == 0.0:
                continue
            if m == 0.0:
                m, e = mu, eu
                continue
            if eu > e:
                m, e, mu, eu = mu, eu, m, e
            if e - eu < 1100:
                m = m + math.ldexp(mu, eu - e)
            m, de = math.frexp(m)
            e += de
        mantissa[v], exponent[v] = m, e
    return mantissa, exponent


@numba.njit(cache=True)
def _longest_path(
    order: np.ndarray, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, sources: np.ndarray, n_nodes: int
) -> np.ndarray:
    """Longest weighted distance from any source to each node (-inf if unreachable)."""
    dist = np.full(n_nodes, -np.inf)
    for s in sources:
        dist[s] = 0.0
    order_by_dst = np.argsort(dst, kind="mergesort")
    starts = np.searchsorted(dst[order_by_dst], np.arange(n_nodes + 1))
    for v in order:
        best = dist[v]
        for k in range(starts[v], starts[v + 1]):
            e = order_by_dst[k]
            candidate = dist[src[e]] + weight[e]
            if candidate > best:
                best = candidate
        dist[v] = best
    return dist


@dataclass
class Snapshot:
    """CP of one window: per-edge and per-activity-row values, and the path count."""

    graph: ActivityGraph
    edge_cp: np.ndarray  # per edge (0 for waiting edges)
    log_paths: float  # natural log of N, the number of start-to-end paths
    cp_sum: float

    def activity_cp(self, n_rows: int) -> np.ndarray:
        """CP per row of the activity table the graph was built from (pieces of a split activity summed)."""
        cp = np.zeros(n_rows)
        rows = self.graph.activity
        real = rows >= 0
        np.add.at(cp, rows[real], self.edge_cp[real])
        return cp


def _sum_extended(mantissa: np.ndarray, exponent: np.ndarray) -> tuple[float, int]:
    """Sum of extended-exponent floats, exactly scaled to the largest exponent."""
    if len(mantissa) == 0 or not (mantissa > 0).any():
        return 0.0, 0
    top = int(exponent[mantissa > 0].max())
    total = float(np.ldexp(mantissa, exponent - top).sum())
    m, e = math.frexp(total)
    return m, top + e


def critical_participation(graph: ActivityGraph) -> Snapshot:
    """CP of every edge of ``graph``; raises :class:`CPInvariantError` unless CP sums to 1."""
    n_nodes = len(graph.node_time)
    carry = graph.carries_paths
    src, dst = graph.src[carry], graph.dst[carry]
    order = graph.topological_order()
    f_mant, f_exp = _path_counts(order, src, dst, graph.start_anchors, n_nodes)
    b_mant, b_exp = _path_counts(order[::-1].copy(), dst, src, graph.end_anchors, n_nodes)
    n_mant, n_exp = _sum_extended(f_mant[graph.end_anchors], f_exp[graph.end_anchors])
    log_paths = math.log(n_mant) + n_exp * math.log(2.0) if n_mant > 0 else -math.inf
    if not math.isfinite(log_paths):
        raise CPInvariantError(
            f"no path crosses the window [{graph.window_start}, {graph.window_end}): at some instant every worker "
            "waits and no message is in flight; widen the window or check that the trace has the driver's tasks"
        )
    span = graph.window_end - graph.window_start
    edge_cp = np.zeros(len(graph.src))
    share = np.ldexp(f_mant[src] * b_mant[dst] / n_mant, f_exp[src] + b_exp[dst] - n_exp)
    edge_cp[carry] = graph.weight[carry] * share / span
    total = float(edge_cp.sum())
    if abs(total - 1.0) > CP_SUM_TOLERANCE:
        raise CPInvariantError(f"CP over [{graph.window_start}, {graph.window_end}) sums to {total!r}, not 1")
    return Snapshot(graph, edge_cp, log_paths, total)


def snapshot(activities: pd.DataFrame, window_start: float, window_end: float) -> tuple[pd.DataFrame, Snapshot]:
    """``activities`` in the window with a ``cp`` column, and the snapshot it came from."""
    table = activities.reset_index(drop=True)
    result = critical_participation(build_graph(table, window_start, window_end))
    with_cp = table.assign(cp=result.activity_cp(len(table)))
    return with_cp, result


def critical_path_length(graph: ActivityGraph, scale: np.ndarray | None = None) -> float:
    """Longest start-to-end path over path-carrying edges, with edge weights times ``scale``."""
    carry = graph.carries_paths
    weight = graph.weight if scale is None else graph.weight * scale
    src, dst, weight = graph.src[carry], graph.dst[carry], weight[carry]
    dist = _longest_path(graph.topological_order(), src, dst, weight, graph.start_anchors, len(graph.node_time))
    return float(dist[graph.end_anchors].max())
