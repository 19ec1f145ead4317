"""The public API a user writes a managed stream with: one function, the SparkSession and a context in.

A *stream definition* is the user's own PySpark code: it builds the source, the logic and
the sink, and returns the query ready to start. Everything the control plane owns arrives
through the :class:`StreamContext` (state partitions, the trigger, the knobs mapped onto the
source's own options, the workload's validated options); the runtime sets the checkpoint
location, the query name and the trigger on what the function returns. So the same function
runs the live stream, a replay into a new checkpoint, and the code-version probe.

An example in the user's own package (``StreamContext`` and ``stream_definition`` are this
module's; ``examples/orders/src/orders_example/streams.py`` is the whole file, imports included):

.. code-block:: python

    # my_pkg/streams.py
    class OrdersOptions(BaseModel):
        input_dir: str
        output_dir: str

    @stream_definition(options=OrdersOptions, knob_options={"max_per_trigger": "maxFilesPerTrigger"})
    def orders(spark, ctx: StreamContext):
        events = (spark.readStream.format("json").schema("id long, amount double, ts timestamp")
                  .options(**ctx.source_options).load(ctx.options.input_dir))
        totals = events.withWatermark("ts", "10 seconds").groupBy(F.window("ts", "1 minute")).sum("amount")
        return totals.writeStream.outputMode("append").format("parquet").option("path", ctx.options.output_dir)

The spec names it by import path: ``StreamSpec(name="orders", entrypoint="my_pkg.streams:orders", ...)``.
A plain function with the same signature works too (no options, no knob mapping).

Nothing here imports pyspark: specs and definitions are checked in processes (CLI, Dagster
sensors) that never start a JVM.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from dagster_reconf.core.errors import SpecError, StreamStartError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

__all__ = [
    "KNOBS",
    "OutputComparison",
    "StreamContext",
    "StreamDefinition",
    "StreamOutput",
    "check_entrypoint",
    "entrypoint_root",
    "load_definition",
    "stream_definition",
]

KNOBS = ("source_partitions", "max_per_trigger")
"""The knobs a definition maps onto its source's options (``knob_options``), e.g. Kafka's
``minPartitions`` and ``maxOffsetsPerTrigger``, the file source's ``maxFilesPerTrigger``."""

_ENTRYPOINT = re.compile(r"^(?P<module>[A-Za-z_]\w*(\.[A-Za-z_]\w*)*):(?P<attr>[A-Za-z_]\w*)$")


@dataclass(frozen=True)
class StreamContext:
    """What the control plane hands a stream definition each time it builds the query.

    Attributes:
        name: the stream's name (the runtime sets it as the query name).
        code_version: the version of the logic to build (see ``StreamDefinition.code_versions``).
        options: the workload's own options, validated by the definition's options model (a
            plain dict when it declares none).
        state_partitions: partitions of the stateful operators (``spark.sql.shuffle.partitions``
            is already set to it; an existing checkpoint keeps its own count).
        source_partitions: the source-partitions knob, None where the stream has none.
        max_per_trigger: the batch-size knob (in the source's own unit: records, offsets,
            files), None for no cap.
        trigger_interval_s: the processing-time trigger the runtime sets (0: back to back).
        source_options: the knobs as the source's own options, ready for
            ``DataStreamReader.options(**ctx.source_options)`` (``knob_options`` decides the names).
        work_dir: a local directory of the stream's own, for files its code keeps (created).
        purpose: ``stream`` (the live query), ``replay`` (rebuilding state; output discarded)
            or ``probe`` (a code-version check; output discarded).
    """

    name: str
    code_version: str
    options: Any
    state_partitions: int
    source_partitions: int | None
    max_per_trigger: int | None
    trigger_interval_s: float
    source_options: dict[str, str]
    work_dir: Path
    purpose: str = "stream"


@dataclass(frozen=True)
class OutputComparison:
    """What a definition's ``oracle`` returns: the stream's committed output against what it should be, as multisets
    of rows (or of the units the oracle counts in); ``lost`` and ``duplicated`` are what the harnesses read."""

    expected_rows: int
    actual_rows: int
    lost: int
    duplicated: int

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0

    @classmethod
    def of_frames(cls, expected: DataFrame, actual: DataFrame) -> OutputComparison:
        """``expected`` against ``actual`` (two batch DataFrames with the same columns) as multisets of rows.

        Each side is computed once, cached for the four counts that read it: an oracle over input files in an
        object store reads each file once, where four uncached counts would list and read the input three times.
        """
        expected, actual = expected.cache(), actual.cache()
        try:
            return cls(
                expected.count(),
                actual.count(),
                expected.exceptAll(actual).count(),
                actual.exceptAll(expected).count(),
            )
        finally:
            expected.unpersist()
            actual.unpersist()


@dataclass(frozen=True)
class StreamOutput:
    """A streaming DataFrame plus its sink, for definitions that would rather not build the writer.

    Attributes:
        frame: the result DataFrame (``isStreaming``).
        format: the sink format (``parquet``, ``delta``, ``kafka``...); None with ``foreach_batch``.
        output_mode: ``append``, ``update`` or ``complete``.
        options: sink options (``path``...).
        foreach_batch: a ``(batch DataFrame, batch id)`` function instead of a format.
    """

    frame: DataFrame
    format: str | None = None
    output_mode: str = "append"
    options: Mapping[str, str] = field(default_factory=dict)
    foreach_batch: Callable[[DataFrame, int], None] | None = None

    def writer(self) -> DataStreamWriter:
        """The ``DataStreamWriter`` this output describes."""
        if (self.format is None) == (self.foreach_batch is None):
            raise SpecError("StreamOutput needs exactly one of format (e.g. 'parquet') or foreach_batch")
        writer = self.frame.writeStream.outputMode(self.output_mode).options(
            **{k: str(v) for k, v in self.options.items()}
        )
        return writer.foreachBatch(self.foreach_batch) if self.foreach_batch is not None else writer.format(self.format)


@dataclass(frozen=True)
class StreamDefinition:
    """A user's stream: the function that builds it and what the control plane may assume about it.

    Attributes:
        build: ``(spark, context) -> DataStreamWriter | StreamOutput``.
        name: ``module:function``, for messages.
        options_model: a pydantic model validating the workload's options (None: any dict).
        knob_options: knob -> the source option it sets (see :data:`KNOBS`); a spec may override.
        code_versions: the versions of the logic it builds (None: any version string).
        frozen_options: options that define the data (a change needs a new stream, never a restart).
        replayable: whether its sources replay from retained offsets; None: decided from the sources
            Spark reports (files, Kafka, rate and offset-indexed Python sources do).
        oracle: ``(spark, home, spec) -> OutputComparison``: checks the stream's output against a batch
            job over the same input (the ``oracle`` capability); None where there is none.
        description: one line for listings and the UI.
    """

    build: Callable[..., Any]
    name: str
    options_model: type[BaseModel] | None = None
    knob_options: Mapping[str, str] = field(default_factory=dict)
    code_versions: tuple[str, ...] | None = None
    frozen_options: frozenset[str] = frozenset()
    replayable: bool | None = None
    oracle: Callable[..., OutputComparison] | None = None
    description: str = ""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.knob_options) - set(KNOBS))
        if unknown:
            raise SpecError(
                f"stream definition {self.name}: knob_options names unknown knob(s) {unknown}; knobs: {list(KNOBS)}"
            )

    def __call__(self, spark: SparkSession, context: StreamContext) -> Any:
        return self.build(spark, context)

    def parse_options(self, options: Mapping[str, Any]) -> Any:
        """Validate the workload's options with :attr:`options_model`.

        Raises:
            SpecError: naming each bad option, its value and what is allowed.
        """
        if self.options_model is None:
            return dict(options)
        known = set(self.options_model.model_fields)
        unknown = sorted(set(options) - known)
        if unknown and self.options_model.model_config.get("extra") != "allow":  # a misspelt option is not ignored
            raise SpecError(
                f"unknown option(s) {unknown} for stream definition {self.name}; its options: "
                f"{', '.join(sorted(known)) or 'none'}"
            )
        try:
            return self.options_model.model_validate(dict(options))
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"]) or "(root)"
                given = (
                    "missing"
                    if err["type"] == "missing"
                    else f"got {options.get(str(err['loc'][0])) if err['loc'] else options!r}"
                )
                problems.append(f"options.{loc}: {err['msg'].removeprefix('Value error, ')} ({given})")
            raise SpecError(f"invalid options for stream definition {self.name}: " + "; ".join(problems)) from None

    def check_code_version(self, version: str) -> None:
        """Raise :class:`SpecError` if the definition does not build ``version``."""
        if self.code_versions is not None and version not in self.code_versions:
            raise SpecError(
                f"stream definition {self.name} has no code version {version!r}; versions: "
                f"{', '.join(self.code_versions)}"
            )


def stream_definition(
    build: Callable[..., Any] | None = None,
    *,
    options: type[BaseModel] | None = None,
    knob_options: Mapping[str, str] | None = None,
    code_versions: tuple[str, ...] | list[str] | None = None,
    frozen_options: tuple[str, ...] | list[str] | frozenset[str] = (),
    replayable: bool | None = None,
    oracle: Callable[..., OutputComparison] | None = None,
    description: str | None = None,
) -> Any:
    """Declare a stream definition (usable bare, ``@stream_definition``, or with arguments).

    Args:
        options: pydantic model of the workload's options; ``ctx.options`` is an instance of it.
        knob_options: knob -> source option name, e.g. ``{"max_per_trigger": "maxOffsetsPerTrigger"}``.
        code_versions: versions of the logic ``ctx.code_version`` may name.
        frozen_options: options that define the data and never change in place.
        replayable: override what the sources say about replaying from retained offsets.
        oracle: a function checking the output against a batch job (see :class:`StreamDefinition`).
        description: one line; default the function's docstring's first line.
    """

    def wrap(function: Callable[..., Any]) -> StreamDefinition:
        _check_signature(function)
        doc = (inspect.getdoc(function) or "").strip().splitlines()
        return StreamDefinition(
            build=function,
            name=f"{function.__module__}:{function.__qualname__}",
            options_model=options,
            knob_options=dict(knob_options or {}),
            code_versions=tuple(code_versions) if code_versions is not None else None,
            frozen_options=frozenset(frozen_options),
            replayable=replayable,
            oracle=oracle,
            description=description if description is not None else (doc[0] if doc else ""),
        )

    return wrap(build) if build is not None else wrap


def _check_signature(function: Callable[..., Any]) -> None:
    try:
        inspect.signature(function).bind(None, None)
    except TypeError:
        raise SpecError(
            f"a stream definition takes (spark, context); {getattr(function, '__qualname__', function)!r} "
            f"has signature {inspect.signature(function)}"
        ) from None


def _split(entrypoint: str) -> tuple[str, str]:
    match = _ENTRYPOINT.match(entrypoint)
    if match is None:
        raise SpecError(
            f"entrypoint {entrypoint!r} is not an import path; use 'package.module:function', "
            "e.g. 'my_pkg.streams:orders'"
        )
    return match["module"], match["attr"]


def check_entrypoint(entrypoint: str) -> None:
    """Check that ``entrypoint``'s module can be found, without importing it (no user code runs).

    Raises:
        SpecError: malformed, or no such module on the import path.
    """
    module, _ = _split(entrypoint)
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:  # a missing parent package
        found, detail = None, f" ({exc})"
    else:
        detail = ""
    if found is None:
        raise SpecError(
            f"entrypoint {entrypoint!r}: no module {module!r} on the import path{detail}; install the package "
            f"that holds the stream, or run from the directory that contains {module.split('.')[0]!r}"
        )


def entrypoint_root(entrypoint: str) -> Path | None:
    """The import root the entrypoint's top-level package is found under (for the driver's PYTHONPATH)."""
    module, _ = _split(entrypoint)
    top = module.split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin in (None, "built-in", "frozen"):
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        return Path(locations[0]).parent if locations else None
    origin = Path(spec.origin)
    return origin.parent.parent if origin.name == "__init__.py" else origin.parent


def load_definition(entrypoint: str) -> StreamDefinition:
    """Import the stream definition named ``module:function``.

    A plain function (not declared with :func:`stream_definition`) is wrapped with defaults.

    Raises:
        SpecError: malformed path, missing module or attribute, or not a stream definition.
        StreamStartError: the module raised while it was imported (its error is in the message).
    """
    module_name, attr = _split(entrypoint)
    check_entrypoint(entrypoint)
    try:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise SpecError(f"entrypoint {entrypoint!r}: importing {module_name!r} failed: {exc}") from None
    except (SystemExit, KeyboardInterrupt) as exc:  # a module's own exit: an error here, not the end of the caller
        raise StreamStartError(
            f"entrypoint {entrypoint!r}: importing {module_name!r} raised {type(exc).__name__}"
            f"{f'({exc.code})' if isinstance(exc, SystemExit) else ''}: a stream definition's module must not exit "
            "when imported"
        ) from None
    except Exception as exc:
        raise StreamStartError(
            f"entrypoint {entrypoint!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    target = getattr(module, attr, None)
    if target is None:
        public = sorted(n for n, v in vars(module).items() if isinstance(v, StreamDefinition))
        hint = f"; stream definitions there: {', '.join(public)}" if public else ""
        raise SpecError(f"entrypoint {entrypoint!r}: module {module_name!r} has no attribute {attr!r}{hint}")
    if isinstance(target, StreamDefinition):
        return target
    if callable(target) and not isinstance(target, type):
        return stream_definition(target)
    raise SpecError(
        f"entrypoint {entrypoint!r} is a {type(target).__name__}, not a stream definition; point it at a "
        "function (spark, context) -> DataStreamWriter"
    )
