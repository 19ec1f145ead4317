"""What ``reconf`` prints: a stream's status, its live progress, cells that never read a user's value as markup."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from dagster_reconf.core.errors import summary_line
from dagster_reconf.core.store.metrics import MetricsStore, record_row

__all__ = ["console", "fmt", "lag_table", "progress_table", "status_table", "watch"]

console = Console()


def fmt(value: Any, unit: str = "") -> str:
    """A table cell: the value as text, never read as markup (a user's value may hold brackets)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}{unit}"
    return f"{value:,}{unit}" if isinstance(value, int) else escape(f"{value}{unit}")


def status_table(status: dict[str, Any]) -> Table:
    """One stream's status as a two-column table."""
    table = Table(
        title=escape(f"stream {status.get('name')} ({status.get('entrypoint')}) - {status.get('state')}"),
        show_header=False,
    )
    rows = [("failure", fmt(summary_line(status["failure"])))] if status.get("failure") else []
    if status.get("query_ended"):
        ended = status["query_ended"]
        when = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ended["at"])) if ended.get("at") else "at an unknown time"
        )
        failed = f": failed, {summary_line(ended['exception'])}" if ended.get("exception") else ""
        rows.append(("query ended", fmt(f"{when}{failed} (`reconf plan` advises its next run)")))
    rows += [
        ("batch id", fmt(status.get("batch_id"))),
        ("input rate", fmt(status.get("input_rows_per_second"), " rows/s")),
        ("processed rate", fmt(status.get("processed_rows_per_second"), " rows/s")),
        ("batch duration", fmt(status.get("batch_duration_ms"), " ms")),
        (
            "backlog",
            fmt(status.get("backlog_events"), " events")
            if status.get("backlog_events") is not None
            else f"unknown ({status.get('backlog_unknown')})"
            if status.get("backlog_unknown")
            else "-",
        ),
        ("trigger", _trigger(status.get("spec"))),
        ("sources", fmt(status.get("source_kinds"))),
        ("guarantee", fmt((status.get("delivery") or {}).get("guarantee"))),
        *_connector_rows(status.get("kafka_connector")),
        ("watermark", fmt(status.get("watermark"))),
        ("master", fmt(status.get("master"))),
        ("Spark UI", fmt(status.get("spark_ui"))),
    ]
    rows += [(f"state rows: {op}", fmt(n)) for op, n in (status.get("state_rows") or {}).items()]
    for label, value in rows:
        table.add_row(label, value)
    return table


def _trigger(spec: dict[str, Any] | None) -> str:
    """The stream's trigger and whose it is: the definition's own (kept by every plan) or the control plane's knob."""
    if not spec:
        return "-"
    interval = float(spec.get("trigger_interval_s", 0.0))
    mode = f"processingTime {interval:g} s" if interval > 0 else "processingTime 0 (batches back to back)"
    owner = {"definition": "set in the definition", "spec": "set in the spec", "default": "the default"}
    return f"{mode} ({owner.get(str(spec.get('trigger_from')), 'the default')})"


def lag_table(lag: dict[str, Any]) -> Table:
    """Consumer lag per Kafka partition: the checkpoint's committed offset against the broker's."""
    table = Table(title=f"kafka lag: {lag['total']:,} records")
    for column in ("partition", "committed", "earliest", "latest", "lag"):
        table.add_column(column, justify="left" if column == "partition" else "right")
    for p in lag["partitions"]:
        committed = fmt(p["committed"]) if p["committed"] is not None else "not read yet"
        table.add_row(f"{p['topic']}/{p['partition']}", committed, fmt(p["earliest"]), fmt(p["latest"]), fmt(p["lag"]))
    return table


def _connector_rows(pairing: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The Kafka connector's build against Spark's, and the warning where their minor versions differ."""
    if not pairing:
        return []
    found = pairing["connector"] or "not on the classpath"
    rows = [("kafka connector", fmt(f"{found} on Spark {pairing['spark']}"))]
    return rows + ([("", f"[yellow]{escape(pairing['warning'])}[/]")] if pairing.get("warning") else [])


def progress_table(name: str, rows: list[dict[str, Any]], limit: int = 12) -> Table:
    """The last ``limit`` micro-batches of a stream."""
    table = Table(title=f"stream {name}: live progress")
    for column in ("batch", "input rows", "in rows/s", "processed rows/s", "duration ms", "backlog", "state rows"):
        table.add_column(column, justify="right")
    for row in rows[-limit:]:
        table.add_row(
            str(row["batch_id"]),
            fmt(row["num_input_rows"]),
            fmt(row["input_rows_per_second"]),
            fmt(row["processed_rows_per_second"]),
            fmt(row["batch_duration_ms"]),
            fmt(row["backlog_events"]),
            fmt(row["state_rows"]),
        )
    return table


def watch(store: MetricsStore, name: str, seconds: float) -> list[dict[str, Any]]:
    """Show a stream's progress live for ``seconds``, reading the metrics store incrementally."""
    rows: list[dict[str, Any]] = []
    cursor = store.path.stat().st_size if store.path.exists() else 0
    deadline = time.monotonic() + seconds
    with Live(
        progress_table(name, rows), console=console, refresh_per_second=2, transient=not console.is_terminal
    ) as live:
        while time.monotonic() < deadline:
            records, cursor = store.read(cursor)
            rows += [record_row(r) for r in records if r.get("kind") == "progress"]
            live.update(progress_table(name, rows))
            time.sleep(0.5)
    if not console.is_terminal:
        console.print(progress_table(name, rows))
    return rows
