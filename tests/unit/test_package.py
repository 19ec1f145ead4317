import subprocess
import sys

import dagster

import dagster_reconf


def test_version():
    assert dagster_reconf.__version__ == "0.1.0"


def test_public_surface_is_grouped_sorted_and_importable():
    groups = (dagster_reconf._STREAM_API, dagster_reconf._ENGINE, dagster_reconf._DAGSTER)
    for group in groups:
        assert list(group) == sorted(group), "each group of the public names is ASCII-sorted"
    assert dagster_reconf.__all__ == ["__version__", *[name for group in groups for name in group]]
    assert len(set(dagster_reconf.__all__)) == len(dagster_reconf.__all__)
    for name in dagster_reconf.__all__:
        assert hasattr(dagster_reconf, name)


def test_import_does_not_load_pyspark():
    code = "import sys, dagster_reconf; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False", (
        "importing dagster_reconf loaded pyspark; "
        "run `python -X importtime -c 'import dagster_reconf'` to find the import"
    )


def test_spark_workers_do_not_load_dagster():
    """Spark's Python workers import the bundled sources in every new worker process: keep that import light."""
    code = "import sys, dagster_reconf.workloads.sources; print('dagster' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False False", (
        "the source module loaded Dagster or pandas; "
        "see `python -X importtime -c 'import dagster_reconf.workloads.sources'`"
    )


def _imports(package: str) -> list[tuple[str, str]]:
    """(file, imported module) for every import in the modules of ``package``, relative ones resolved."""
    import ast
    from importlib.util import resolve_name
    from pathlib import Path

    root = Path(dagster_reconf.__file__).parent.parent
    found = []
    for path in (root / package.replace(".", "/")).rglob("*.py"):
        module_package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [
                    resolve_name("." * node.level + (node.module or ""), module_package)
                    if node.level
                    else node.module or ""
                ]
            found += [(path.name, n) for n in names]
    return found


def test_core_imports_neither_dagster_nor_the_layers_above():
    """The core must stay usable without Dagster and without our workloads (DESIGN.md section 3)."""
    offenders = [
        f"{f}: {n}"
        for f, n in _imports("dagster_reconf.core")
        if n.split(".")[0] in ("dagster", "dagster_pyspark")
        or (n.startswith("dagster_reconf.") and not n.startswith("dagster_reconf.core"))
    ]
    assert offenders == []


def test_dagster_blocks_do_not_import_the_bundled_workloads():
    """The Dagster building blocks serve any stream: they know the core, never our workloads."""
    offenders = [f"{f}: {n}" for f, n in _imports("dagster_reconf.dagster") if n.startswith("dagster_reconf.workloads")]
    assert offenders == []


def test_workloads_use_the_public_api_only_where_they_build_streams():
    """The bundled streams are written like a user's: against dagster_reconf's core, never the reference location."""
    offenders = [
        f"{f}: {n}"
        for f, n in _imports("dagster_reconf.workloads")
        if n.split(".")[0] in ("assets", "sensors", "resources", "definitions", "tests", "benchmarks")
    ]
    assert offenders == []


def test_definitions_load():
    """Under its own test instance: Dagster keeps a global state storage from earlier tests' instances."""
    import definitions

    with dagster.instance_for_test():
        dagster.Definitions.validate_loadable(definitions.defs)
        graph = definitions.defs.resolve_asset_graph()
    names = {s.name for s in definitions.defs.sensors}
    assert names == {
        "nexmark_q5_progress_sensor",
        "wordcount_progress_sensor",
        "nexmark_q5_scaling_sensor",
        "wordcount_scaling_sensor",
        "reconfiguration_failure_sensor",
    }
    upstream = {key.to_user_string() for key in graph.get(dagster.AssetKey("ds2_plans")).parent_keys}
    assert upstream == {"trace_snapshots", "cp_summaries"}
    assert dagster.AssetKey("ds2_plans") in graph.get(dagster.AssetKey("stream_configuration")).parent_keys
    steps = (
        definitions.defs.resolve_job_def("reconfigure_stream_job").graph.node_dict["stream_configuration"].definition
    )
    assert [n.name for n in steps.nodes_in_topological_order] == [
        "preflight",
        "prepare",
        "pause",
        "migrate",
        "verify",
        "resume",
        "observe",
        "record",
    ]


def test_unknown_environment_is_refused():
    import pytest

    from resources import resources_for_env

    with pytest.raises(ValueError, match=r"DAGSTER_RECONF_ENV='staging' is not a known environment"):
        resources_for_env("staging")


def test_production_streams_take_master_and_storage_from_the_environment(monkeypatch, tmp_path):
    import pytest

    from resources.streams import BUNDLED_STREAMS, streams_for_env

    assert streams_for_env("local") == BUNDLED_STREAMS and all(s.storage is None for s in BUNDLED_STREAMS)
    monkeypatch.delenv("RECONF_STORAGE", raising=False)
    monkeypatch.setenv("RECONF_SPARK_MASTER", "spark://10.0.0.5:7077")
    with pytest.raises(ValueError, match="RECONF_STORAGE"):
        streams_for_env("production")
    monkeypatch.setenv("RECONF_STORAGE", "hdfs://namenode:8020/reconf")
    production = streams_for_env("production")
    assert {(s.master, s.storage) for s in production} == {("spark://10.0.0.5:7077", "hdfs://namenode:8020/reconf")}
    assert [s.name for s in production] == [s.name for s in BUNDLED_STREAMS]
    monkeypatch.setenv("RECONF_STORAGE", "namenode/reconf")
    with pytest.raises(Exception, match="is not a URL"):
        streams_for_env("production")


def test_the_example_project_loads_over_the_public_api_only():
    """examples/orders: a user's stream and its own dg project (its tests: tests/unit/dagster/test_dg_projects.py)."""
    from orders_example.definitions import defs

    with dagster.instance_for_test():
        dagster.Definitions.validate_loadable(defs())
    offenders = [f"{f}: {n}" for f, n in _imports("examples") if n.startswith("dagster_reconf.")]
    assert offenders == [], "the example imports only dagster_reconf's public names (from dagster_reconf import ...)"


def test_a_refusal_quoting_spark_keeps_one_line_per_problem_and_the_whole_text_in_details():
    from dagster_reconf.core.errors import ReconfigurationRefused

    java = "org.apache.spark.SparkException: state store gone\n" + "\tat org.apache.Foo.bar(Foo.scala:1)\n" * 30
    python = (
        "py4j.Py4JException: An exception was raised by the Python Proxy. Return Message: Traceback (most recent "
        'call last):\n  File "x.py", line 1, in write\n    raise RuntimeError("no table")\nRuntimeError: no table'
    )
    refused = ReconfigurationRefused("s", [java, python, "plain"])
    assert refused.problems == ["org.apache.spark.SparkException: state store gone", "RuntimeError: no table", "plain"]
    assert refused.details[0] == java and "\n" not in str(refused)
