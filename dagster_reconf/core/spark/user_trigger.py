"""The trigger a user's definition set on its writer: read before the control plane touches it, then honoured or the
stream refused at start, never replaced.

* none (Spark's default, ``processingTime`` 0): the trigger is the control plane's knob, ``trigger_interval_s``.
* ``processingTime``: the stream's trigger. The spec takes it where it sets none; a spec that sets another interval is
  refused at start, naming both. No plan changes it (``trigger_from="definition"``): DS2 plans the rest around it.
* ``availableNow`` and ``once``: refused. They run to the end of the input that is there and stop: a finite catch-up,
  which is a Dagster job (an op or asset over a SparkSession), not a managed stream that is started, watched,
  restarted after a death and reconfigured while it runs.
* ``realTime`` (Spark 4.1+): refused. Its batches are long-running epochs whose tasks each hold a slot for the whole
  batch; the pause at a micro-batch boundary, the state migration and DS2's micro-batch model do not hold for it.
* ``continuous`` (experimental): refused. It has no micro-batches to pause between and keeps no per-batch offsets.

Where it is read: under Spark Classic (how managed streams run: the runtime builds the session, and the native state
migration needs Classic) the JVM writer holds it (``DataStreamWriter.trigger``, a private field read by reflection);
a Spark Connect writer carries it in its plan (``WriteStreamOperationStart``). Spark's default and an explicit
``processingTime="0 seconds"`` are the same value there, so both read as none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from dagster_reconf.core.errors import StreamStartError
from dagster_reconf.core.spec import StreamSpec

__all__ = ["UserTrigger", "read_trigger", "resolve_trigger"]

TriggerKind = Literal["none", "processing_time", "available_now", "once", "continuous", "real_time"]

_JVM_KINDS: dict[str, TriggerKind] = {
    "ProcessingTimeTrigger": "processing_time",
    "AvailableNowTrigger": "available_now",
    "OneTimeTrigger": "once",
    "ContinuousTrigger": "continuous",
    "RealTimeTrigger": "real_time",
}


@dataclass(frozen=True)
class UserTrigger:
    """The trigger a writer carries: its kind and, for the timed ones, its interval in seconds (``processingTime``'s
    interval, ``continuous``'s checkpoint interval, ``realTime``'s batch duration)."""

    kind: TriggerKind
    interval_s: float | None = None

    def describe(self) -> str:
        """As the user wrote it: ``trigger(processingTime='7 seconds')``."""
        if self.kind == "none":
            return "no trigger"
        keyword = {"processing_time": "processingTime", "continuous": "continuous", "real_time": "realTime"}.get(
            self.kind
        )
        if keyword is not None:
            return f"trigger({keyword}='{self.interval_s:g} seconds')"
        return f"trigger({'availableNow' if self.kind == 'available_now' else 'once'}=True)"


def read_trigger(writer: Any) -> UserTrigger:
    """The trigger ``writer`` (a ``DataStreamWriter``, Classic or Connect) carries."""
    proto = getattr(writer, "_write_proto", None)
    if proto is not None:
        return _from_connect_plan(proto)
    return _from_jvm(writer._jwrite)


def _from_jvm(jwriter: Any) -> UserTrigger:
    owner = jwriter.getClass()
    while owner is not None:  # the field is declared by the writer's abstract base in Spark 4
        try:
            field = owner.getDeclaredField("trigger")
            break
        except Exception:  # py4j's Java NoSuchFieldException
            owner = owner.getSuperclass()
    else:
        raise StreamStartError("this Spark's DataStreamWriter keeps no trigger field: its trigger cannot be read")
    field.setAccessible(True)
    trigger = field.get(jwriter)
    name = str(trigger.getClass().getSimpleName()).rstrip("$")
    kind = _JVM_KINDS.get(name)
    if kind is None:
        raise StreamStartError(f"the definition's writer carries a trigger of a kind not known here ({name})")
    if kind == "processing_time":
        interval_ms = int(trigger.intervalMs())
        return UserTrigger("processing_time", interval_ms / 1000.0) if interval_ms > 0 else UserTrigger("none")
    if kind == "continuous":
        return UserTrigger(kind, int(trigger.intervalMs()) / 1000.0)
    if kind == "real_time":
        return UserTrigger(kind, int(trigger.batchDurationMs()) / 1000.0)
    return UserTrigger(kind)


def _from_connect_plan(proto: Any) -> UserTrigger:
    which = proto.WhichOneof("trigger")
    if which is None:
        return UserTrigger("none")
    if which in ("available_now", "once"):
        return UserTrigger(which)
    kind: TriggerKind = {
        "processing_time_interval": "processing_time",
        "continuous_checkpoint_interval": "continuous",
        "real_time_batch_duration": "real_time",
    }[which]
    seconds = _interval_seconds(str(getattr(proto, which)))
    return UserTrigger("none") if kind == "processing_time" and seconds == 0 else UserTrigger(kind, seconds)


def _interval_seconds(text: str) -> float:
    """An interval as Spark reads it (``'7 seconds'``, ``'500 milliseconds'``, ``'1 minute'``), in seconds."""
    units = {"millisecond": 0.001, "second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}
    parts = text.lower().replace("interval", "").split()
    total = 0.0
    for number, unit in zip(parts[::2], parts[1::2]):
        total += float(number) * units[unit.rstrip("s")]
    return total


def resolve_trigger(spec: StreamSpec, trigger: UserTrigger, what: str) -> StreamSpec:
    """``spec`` with the definition's ``trigger`` honoured (see module docstring); ``what`` names the definition.

    Raises:
        StreamStartError: a trigger the control plane cannot run as a managed stream, or a spec that sets another
            processing-time interval than the definition's.
    """
    said = f"stream {spec.name!r}: its definition {what} sets {trigger.describe()}"
    if trigger.kind in ("available_now", "once"):
        raise StreamStartError(
            f"{said}, a run that stops once it has read what is there; a finite catch-up is a Dagster job (an op "
            "or asset with a SparkSession, e.g. dagster-pyspark's PySparkResource), not a managed stream: run it "
            "there, or remove the trigger to manage the query as a stream"
        )
    if trigger.kind == "real_time":
        raise StreamStartError(
            f"{said}: real-time mode runs long batches whose tasks each hold a slot for the whole batch, where the "
            "control plane pauses at micro-batch boundaries, migrates state offline and plans micro-batches; it "
            "cannot manage it safely: use trigger(processingTime=...) or none"
        )
    if trigger.kind == "continuous":
        raise StreamStartError(
            f"{said}: continuous processing (experimental) has no micro-batches to pause between and records no "
            "offsets per batch, so the control plane cannot stop, migrate or restart it without loss: use "
            "trigger(processingTime=...) or none"
        )
    if trigger.kind == "none":
        return spec
    interval = float(trigger.interval_s or 0.0)
    if spec.trigger_from == "spec" and spec.trigger_interval_s != interval:
        raise StreamStartError(
            f"{said} and its spec trigger_interval_s={spec.trigger_interval_s:g}: the definition's trigger is the "
            f"stream's; remove trigger_interval_s from the spec (it then runs every {interval:g} s), or change the "
            "trigger in the definition"
        )
    if spec.trigger_from == "definition" and spec.trigger_interval_s == interval:
        return spec
    return spec.model_copy(update={"trigger_interval_s": interval, "trigger_from": "definition"})
