"""What a managed stream is: :class:`StreamSpec`, validated at the boundary.

A spec is the control plane's part of a stream: its name, the user's code that builds it
(``entrypoint``, an import path, see :mod:`dagster_reconf.core.definition`) with its version and the
workload's own ``options``, where it runs (Spark master, resources, driver and control
addresses), the knobs the control plane turns (state and source partitions, trigger,
batch size) and where its checkpoints and event logs live. The workload's options are
the definition's to validate; a spec only keeps them.

Settings differ in what changing them costs, and :func:`restart_scope` says which: some
only restart the query, some need a fresh SparkContext (same driver process, same JVM),
the state partitions of a stateful stream need a state migration, and some define the
stream's data or identity and are never changed in place.
"""

from __future__ import annotations

import json
import os
import re
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from dagster_reconf.core.definition import KNOBS, StreamDefinition, load_definition
from dagster_reconf.core.errors import SpecError, validated
from dagster_reconf.core.kafka.access import KafkaAccess
from dagster_reconf.core.store.storage import validate_storage_url

__all__ = [
    "STRATEGIES",
    "RestartScope",
    "Strategy",
    "StreamSpec",
    "context_scope",
    "read_spec_file",
    "restart_scope",
    "MasterUrl",
    "validate_master",
    "validate_spec",
]

_MASTER_PATTERNS = [
    re.compile(r"^local(\[(\*|[1-9]\d*)(,\s*[1-9]\d*)?\])?$"),
    re.compile(r"^spark://[A-Za-z0-9.\-]+:\d{1,5}(,[A-Za-z0-9.\-]+:\d{1,5})*$"),
    re.compile(r"^k8s://https?://\S+$"),
    re.compile(r"^yarn$"),
]
_NAME_PATTERN = r"^[a-z][a-z0-9_\-]{0,62}$"
_HOST_PATTERN = r"^[A-Za-z0-9.\-:]+$"
LOOPBACK = "127.0.0.1"

Strategy = Literal["native", "replay", "precopy"]  # how a change of state partitions moves the state
STRATEGIES: tuple[str, ...] = ("native", "replay", "precopy")


LOCAL_SLOTS_PER_CPU = 16  # local[N] beyond this many task slots per CPU of the machine is a typo, not a plan
_LOCAL_SLOTS = re.compile(r"^local\[(\d+)")


def validate_master(master: str) -> str:
    """Return ``master`` if it is a Spark master URL Spark understands, else raise SpecError."""
    if any(p.match(master) for p in _MASTER_PATTERNS):
        slots = _LOCAL_SLOTS.match(master)
        if slots and len(slots.group(1)) > 6:
            raise SpecError(
                f"master {master!r} asks for {slots.group(1)} task slots; use local[N] with N the cores to use"
            )
        return master
    raise SpecError(
        f"master {master!r} is not a Spark master URL; use local[N] (e.g. local[2]), "
        "spark://HOST:PORT (a standalone cluster, see `reconf cluster start`), k8s://https://HOST:PORT or yarn"
    )


def _master_field(value: str) -> str:
    try:
        return validate_master(value)
    except SpecError as exc:
        raise ValueError(str(exc)) from None


MasterUrl = Annotated[str, AfterValidator(_master_field)]  # a model field holding a Spark master URL


MAX_PER_TRIGGER = 1 << 53  # Spark reads the cap as a Long; beyond 2^53 a JSON number is no longer exact


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """A spec file's fields (a JSON object, as ``reconf stream start --spec-file`` and the Component take).

    Raises:
        SpecError: the file is missing, unreadable, not JSON, or not an object; the message names the path.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"spec file {path} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read spec file {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"spec file {path} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if not isinstance(data, dict):
        raise SpecError(f"spec file {path} must hold a JSON object of spec fields, not a {type(data).__name__}")
    return data


class StreamSpec(BaseModel):
    """A managed stream: the user's code, where it runs, and the knobs the control plane turns."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., pattern=_NAME_PATTERN, description="Stream name: lowercase letters, digits, - and _.")
    entrypoint: str | None = Field(
        ...,
        description="The stream definition's import path, 'package.module:function'; None for "
        "an attached stream (observed from its event logs, never started here).",
    )
    code_version: str = Field(
        "1", min_length=1, max_length=64, description="Version of the logic the definition builds."
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="The workload's own options (validated by its definition)."
    )
    master: MasterUrl = Field("local[2]", description="Spark master URL.")
    executor_cores: int | None = Field(None, ge=1, description="Cores per executor (cluster masters).")
    max_cores: int | None = Field(
        None, ge=1, description="spark.cores.max: total cores of the application (cluster masters)."
    )
    cores_ceiling: int | None = Field(
        None,
        ge=1,
        description="On a standalone master (spark://): the most cores the "
        "application may grow to in its SparkContext. spark.cores.max is set to it, and "
        "max_cores is reached by adding and removing executors, so a cores change up to "
        "it needs no new SparkContext. None: every max_cores change starts a new one.",
    )
    executor_memory: str | None = Field(None, pattern=r"^\d+[kmgt]?$", description="Executor memory, e.g. 1g.")
    driver_host: str = Field(
        LOOPBACK,
        pattern=_HOST_PATTERN,
        description="Address executors use to reach the driver "
        "(spark.driver.host): loopback for local masters, a routable address on a cluster.",
    )
    driver_bind_address: str = Field(
        LOOPBACK,
        pattern=_HOST_PATTERN,
        description="Address the driver listens on (spark.driver.bindAddress), e.g. 0.0.0.0 on a cluster.",
    )
    control_bind_address: str = Field(
        LOOPBACK,
        pattern=_HOST_PATTERN,
        description="Address the control endpoint listens "
        "on (token-authenticated); another host's Dagster run workers need a routable one.",
    )
    control_token_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of an environment variable that holds the control endpoint's token (32 characters or "
        "more) on the driver's host and on the control plane's: for hosts that share no files. None: a fresh token "
        "file in the runtime home, mode 0600 (one host).",
    )
    control_tls_cert: str | None = Field(
        None,
        min_length=1,
        description="PEM certificate chain the control endpoint presents (a path on the driver's host), for the "
        "address it binds to (control_bind_address, as an IP address or DNS name in the certificate); with "
        "control_tls_key the endpoint speaks HTTPS only. None: plain HTTP (keep it on a network only the control "
        "plane reaches).",
    )
    control_tls_key: str | None = Field(
        None, min_length=1, description="The certificate's private key, PEM (a path on the driver's host)."
    )
    control_tls_ca: str | None = Field(
        None,
        min_length=1,
        description="PEM bundle of the authority that signed control_tls_cert (a path on each host that reaches "
        "the endpoint). None: the system's trust store.",
    )
    source_partitions: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="Source partitions per micro-batch, where the "
        "definition maps this knob onto a source option (knob_options).",
    )
    state_partitions: int = Field(
        4, ge=1, le=10_000, description="spark.sql.shuffle.partitions (fixed by the checkpoint for stateful queries)."
    )
    trigger_interval_s: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="Processing-time trigger interval in seconds. Where the definition sets its own "
        "trigger(processingTime=...), that one is the stream's: leave this out (another value is refused at start).",
    )
    trigger_from: Literal["default", "spec", "definition"] = Field(
        "default",
        description="Who set trigger_interval_s: left at its default, given in the spec (or by a reconfiguration), "
        "or read from the definition's own trigger at start. A definition's trigger is the user's: no plan changes it.",
    )
    max_per_trigger: int | None = Field(
        None,
        ge=1,
        le=MAX_PER_TRIGGER,
        description="Cap per micro-batch in the source's own unit (records, "
        "offsets, files), where the definition maps this knob (knob_options).",
    )
    knob_options: dict[str, str] = Field(
        default_factory=dict,
        description="Knob -> source option name, overriding the "
        "definition's (e.g. {'source_partitions': 'minPartitions'}).",
    )
    accept_loss: bool = Field(
        False,
        description="Accept losing a source's in-flight input at a stop and restart, where a source of unknown kind "
        "is not known to resume exactly: reconfigurations then go ahead and say so. False: they are refused at "
        "preflight. (A socket or memory source cannot restart at all: always refused.)",
    )
    kafka: KafkaAccess | None = Field(
        None,
        description="How the control plane reaches the brokers of the Kafka topics the stream reads, to read their "
        "offsets: consumer lag while the stream is paused or down, the topic's partitions and retention at "
        "preflight. None: lag comes from the stream's progress only, and a replay over Kafka is refused (its "
        "retention cannot be checked).",
    )
    instrumentation: bool = Field(
        True, description="Event log and progress listener on (off only for overhead benchmarks)."
    )
    spark_conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings.")
    storage: str | None = Field(
        None,
        description="URL where checkpoints and event logs live (any Hadoop-compatible "
        "filesystem: file:///, hdfs://, s3a://, ...); None keeps them under the runtime home.",
    )

    @model_validator(mode="before")
    @classmethod
    def _trigger_given(cls, data: Any) -> Any:
        """A trigger interval given without saying by whom was given in the spec."""
        if isinstance(data, dict) and "trigger_interval_s" in data and "trigger_from" not in data:
            return {**data, "trigger_from": "spec"}
        return data

    @field_validator("storage")
    @classmethod
    def _valid_storage(cls, value: str | None) -> str | None:
        return None if value is None else validate_storage_url(value)

    @field_validator("entrypoint")
    @classmethod
    def _import_path(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$", value):
            raise ValueError(f"entrypoint {value!r} is not an import path; use 'package.module:function'")
        return value

    @field_validator("knob_options")
    @classmethod
    def _known_knobs(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(KNOBS))
        if unknown:
            raise ValueError(f"unknown knob(s) {unknown}; knobs that map onto source options: {list(KNOBS)}")
        return value

    @model_validator(mode="after")
    def _conf_not_shadowing(self) -> "StreamSpec":
        owned = {
            "spark.master",
            "spark.sql.shuffle.partitions",
            "spark.eventLog.enabled",
            "spark.eventLog.dir",
            "spark.driver.host",
            "spark.driver.bindAddress",
        }
        clash = sorted(owned & set(self.spark_conf))
        if clash:
            raise ValueError(
                f"spark_conf must not set {clash}: use the spec fields master, state_partitions, "
                "driver_host and driver_bind_address instead"
            )
        return self

    @model_validator(mode="after")
    def _tls_pair(self) -> "StreamSpec":
        if (self.control_tls_cert is None) != (self.control_tls_key is None):
            raise ValueError(
                "control_tls_cert and control_tls_key go together: give both (HTTPS) or neither (plain HTTP)"
            )
        if self.control_tls_ca is not None and self.control_tls_cert is None:
            raise ValueError("control_tls_ca is the authority of control_tls_cert: give the certificate and its key")
        return self

    @model_validator(mode="after")
    def _ceiling_fits(self) -> "StreamSpec":
        if self.cores_ceiling is None:
            return self
        if not self.master.startswith("spark://"):
            raise ValueError(
                f"cores_ceiling is for standalone masters (spark://HOST:PORT), not {self.master!r}: "
                "elsewhere a cores change starts a new SparkContext; remove cores_ceiling"
            )
        if self.executor_cores is None or self.max_cores is None:
            raise ValueError(
                "cores_ceiling needs executor_cores and max_cores: the cores are counted in executors of "
                "executor_cores each"
            )
        if self.max_cores > self.cores_ceiling:
            raise ValueError(
                f"max_cores {self.max_cores} is above cores_ceiling {self.cores_ceiling}: raise "
                "cores_ceiling (a new SparkContext) or ask for fewer cores"
            )
        if self.max_cores % self.executor_cores:
            raise ValueError(
                f"max_cores {self.max_cores} is not a whole number of executors of executor_cores "
                f"{self.executor_cores}: use a multiple of {self.executor_cores}"
            )
        return self

    @property
    def executor_memory_setting(self) -> str | None:
        """Executor memory as set, by ``executor_memory`` or ``spark_conf`` (None: Spark's default)."""
        return self.executor_memory or self.spark_conf.get("spark.executor.memory")

    @property
    def executors(self) -> int | None:
        """Executors the stream runs on where its cores are resized in place (``cores_ceiling`` set), else None."""
        if self.cores_ceiling is None or self.max_cores is None or self.executor_cores is None:
            return None
        return self.max_cores // self.executor_cores

    @classmethod
    def parse(cls, data: dict[str, Any]) -> "StreamSpec":
        """Validate ``data``; raise :class:`SpecError` naming each bad field and its value."""
        return validated(cls, data, "stream spec")

    def with_changes(self, changes: dict[str, Any]) -> "StreamSpec":
        """A copy with ``changes`` applied and validated.

        ``options`` and ``knob_options`` merge key by key (``{"options": {"rate": 5}}`` keeps the
        other options); a dotted key sets one option (``{"options.rate": 5}``).
        """
        merged = self.model_dump()
        if "trigger_interval_s" in changes and "trigger_from" not in changes:
            if _differs(changes["trigger_interval_s"], self.trigger_interval_s):
                merged["trigger_from"] = "spec"  # a new interval is the spec's now (a definition's is then refused)
        for key, value in changes.items():
            field, _, sub = key.partition(".")
            if field in ("options", "knob_options") and sub:
                merged[field] = {**merged[field], sub: value}
            elif field in ("options", "knob_options") and isinstance(value, dict):
                merged[field] = {**merged[field], **value}
            else:
                merged[key] = value
        return StreamSpec.parse(merged)


def _differs(value: Any, current: float) -> bool:
    try:
        return float(value) != current
    except (TypeError, ValueError):
        return True  # not a number: the validation names it


class RestartScope(str, Enum):
    """What applying a settings change costs, cheapest first."""

    NONE = "none"  # nothing changed
    QUERY = "query"  # stop at a batch boundary, start the query again
    EXECUTORS = "executors"  # also add or remove executors, in the same SparkContext (within cores_ceiling)
    SESSION = "session"  # also a new SparkContext in the same driver process
    STATE = "state"  # state partitions change: needs a state migration


QUERY_FIELDS = {"source_partitions", "trigger_interval_s", "max_per_trigger", "code_version", "options", "knob_options"}
SESSION_FIELDS = {
    "master",
    "executor_cores",
    "max_cores",
    "cores_ceiling",
    "executor_memory",
    "spark_conf",
    "instrumentation",
    "driver_host",
    "driver_bind_address",
}
ENDPOINT_FIELDS = {  # read once, when the driver opens its endpoint
    "control_bind_address",
    "control_token_env",
    "control_tls_cert",
    "control_tls_key",
    "control_tls_ca",
}
IDENTITY_FIELDS = {"name", "entrypoint", "storage", *ENDPOINT_FIELDS}
# Read when the driver's JVM launches: a new SparkContext in a running driver ignores them (Spark's configuration docs:
# "must not be set through the SparkConf directly in your application ... the driver JVM has already started").
DRIVER_LAUNCH_SETTINGS = (
    "spark.driver.memory",
    "spark.driver.extraJavaOptions",
    "spark.driver.defaultJavaOptions",
    "spark.driver.extraClassPath",
    "spark.driver.extraLibraryPath",
)


def restart_scope(
    old: StreamSpec, new: StreamSpec, *, stateful: bool = True, frozen_options: frozenset[str] | set[str] = frozenset()
) -> RestartScope:
    """Classify the change from ``old`` to ``new``; refuse changes that alter the stream's identity or data, and
    driver settings that only a new driver process reads (:data:`DRIVER_LAUNCH_SETTINGS`), which a restart in place
    would ignore without a word.

    Args:
        stateful: whether the stream keeps state (its checkpoint's state metadata says so);
            only then do state partitions need a migration.
        frozen_options: the definition's options that define the data.
    """
    changed = {k for k in StreamSpec.model_fields if getattr(old, k) != getattr(new, k)}
    identity = sorted(changed & IDENTITY_FIELDS)
    if identity:
        fix = (
            "stop the stream and start it again with the new control endpoint settings"
            if set(identity) <= ENDPOINT_FIELDS
            else "start a new stream with another name"
        )
        raise SpecError(f"{identity} cannot change in place: they define the stream's identity, code or storage; {fix}")
    launch = [k for k in DRIVER_LAUNCH_SETTINGS if old.spark_conf.get(k) != new.spark_conf.get(k)]
    if launch:
        raise SpecError(
            f"spark_conf {launch} take effect only when the driver's JVM launches, and a restart in place keeps "
            f"the running driver; stop the stream (`reconf stream stop {old.name}`) and start it again with "
            "them in its spec"
        )
    frozen = sorted(k for k in frozen_options if old.options.get(k) != new.options.get(k))
    if frozen:
        raise SpecError(
            f"options {frozen} define the stream's data and cannot change in place; start a new stream "
            "with another name"
        )
    if not changed:
        return RestartScope.NONE
    if "state_partitions" in changed and stateful:
        return RestartScope.STATE
    return context_scope(old, new)


def context_scope(old: StreamSpec, new: StreamSpec) -> RestartScope:
    """What the SparkContext needs for ``old`` -> ``new``: nothing (a query restart), executors added or removed (a
    ``max_cores`` change within a ``cores_ceiling`` both specs share), or a new context."""
    changed = {k for k in StreamSpec.model_fields if getattr(old, k) != getattr(new, k)}
    if not changed:
        return RestartScope.NONE
    session = changed & SESSION_FIELDS
    if not session:
        return RestartScope.QUERY
    if (
        session == {"max_cores"} and old.cores_ceiling is not None
    ):  # the new spec was validated against the same ceiling
        return RestartScope.EXECUTORS
    return RestartScope.SESSION


def validate_spec(spec: StreamSpec, definition: StreamDefinition | None = None) -> StreamDefinition:
    """Check ``spec`` against its stream definition: options, code version, knob mapping.

    Imports the user's module (no Spark is started). Returns the definition.

    Raises:
        SpecError: an invalid option, an unknown code version, or a knob set that no source option takes.
        StreamStartError: the user's module raised while it was imported.
    """
    if spec.entrypoint is None:
        raise SpecError(
            f"stream {spec.name!r} is attached: dagster-reconf observes it from its event logs and recommends "
            "plans for it, but has no definition to run; start and change it where it runs"
        )
    slots = _LOCAL_SLOTS.match(spec.master)
    cpus = os.cpu_count() or 1
    if slots and int(slots.group(1)) > LOCAL_SLOTS_PER_CPU * cpus:
        raise SpecError(
            f"master {spec.master!r} runs {slots.group(1)} tasks at once on this machine's {cpus} CPU(s), more than "
            f"{LOCAL_SLOTS_PER_CPU} per CPU; use local[{cpus}] (or a cluster master for more cores)"
        )
    definition = definition or load_definition(spec.entrypoint)
    definition.parse_options(spec.options)
    definition.check_code_version(spec.code_version)
    mapping = {**definition.knob_options, **spec.knob_options}
    for knob in ("source_partitions", "max_per_trigger"):
        if getattr(spec, knob) is not None and knob not in mapping:
            raise SpecError(
                f"{knob}={getattr(spec, knob)} is set, but stream definition {definition.name} maps no source "
                f"option to it; set knob_options={{'{knob}': '<the source option>'}} in the spec (e.g. "
                f"{'minPartitions' if knob == 'source_partitions' else 'maxOffsetsPerTrigger'}), or leave {knob} unset"
            )
    return definition
