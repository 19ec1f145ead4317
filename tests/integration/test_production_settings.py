"""The production settings: a Dagster instance on PostgreSQL from resources/dagster.production.yaml, the
production resource set reading its secrets from the environment, and the ledger on PostgreSQL."""

import shutil
from pathlib import Path

import psycopg
from dagster import AssetKey, DagsterInstance, materialize

from assets import SCALING
from dagster_reconf.core.ledger import AuditLedger
from dagster_reconf.core.store.paths import StreamPaths
from resources import resources_for_env
from resources.streams import BUNDLED_STREAMS

ROOT = Path(__file__).resolve().parents[2]


def test_dagster_on_postgres_with_the_production_resources(postgres_url, tmp_path, monkeypatch):
    with psycopg.connect(postgres_url, autocommit=True) as connection:  # Dagster's own database
        connection.execute("DROP DATABASE IF EXISTS dagster_prod")
        connection.execute("CREATE DATABASE dagster_prod")
    dagster_url = postgres_url.replace("postgresql://", "postgresql+psycopg2://").rsplit("/", 1)[0] + "/dagster_prod"
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "resources" / "dagster.production.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_PG_URL", dagster_url)
    monkeypatch.setenv("RECONF_HOME", str(tmp_path / "reconf"))
    monkeypatch.setenv("RECONF_LEDGER_URL", postgres_url)
    spec = BUNDLED_STREAMS[0]  # declared, stopped: its spec is on disk, no driver runs
    paths = StreamPaths(tmp_path / "reconf", spec.name)
    paths.spec.parent.mkdir(parents=True)
    paths.spec.write_text(spec.model_dump_json())

    with DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        result = materialize(
            [SCALING.plans, SCALING.configuration],
            partition_key=spec.name,
            resources=resources_for_env("production"),
            instance=instance,
        )
        assert result.success
        plan = instance.get_latest_materialization_event(AssetKey("ds2_plans")).asset_materialization
        assert plan.partition == spec.name
        assert "metric window not full: 0 of" in plan.metadata["decision"].value  # no driver has recorded a batch yet
        assert plan.metadata["step"].value == "hold" and plan.metadata["core_seconds_per_hour_saved"].value == 0
        configuration = result.asset_materializations_for_node("stream_configuration")[0].metadata
        assert configuration["applied"].value is False
    ledger = AuditLedger(postgres_url)
    assert ledger.verify().ok
