import subprocess
import sys

import dagster

import dagster_reconf


def test_version():
    assert dagster_reconf.__version__ == "0.1.0"


def test_public_surface_is_sorted_and_importable():
    assert dagster_reconf.__all__ == sorted(dagster_reconf.__all__)
    for name in dagster_reconf.__all__:
        assert hasattr(dagster_reconf, name)


def test_import_does_not_load_pyspark():
    code = "import sys, dagster_reconf; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False", "importing dagster_reconf loaded pyspark; run `python -X importtime -c 'import dagster_reconf'` to find the import"


def test_core_does_not_import_dagster():
    code = (
        "import sys, importlib, pkgutil, dagster_reconf.core as core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'dagster_reconf.core.'): importlib.import_module(m.name)\n"
        "print(sorted(k for k in sys.modules if k == 'dagster' or k.startswith('dagster.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_definitions_load():
    import definitions

    dagster.Definitions.validate_loadable(definitions.defs)
    names = {s.name for s in definitions.defs.sensors}
    assert names == {"nexmark_q5_progress_sensor", "wordcount_progress_sensor"}


def test_unknown_environment_is_refused():
    import pytest

    from resources import resources_for_env

    with pytest.raises(ValueError, match=r"DAGSTER_RECONF_ENV='staging' is not a known environment"):
        resources_for_env("staging")
