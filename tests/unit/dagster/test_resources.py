"""The audit ledger resource follows the runtime home it is given, so the CLI and Dagster share one ledger."""

from dagster_reconf import AuditLedgerResource
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url


def test_the_ledger_lives_in_the_given_home_not_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RECONF_HOME", str(tmp_path / "elsewhere"))
    home = tmp_path / "home"
    home.mkdir()
    AuditLedger(default_ledger_url(home)).acquire_lock(
        stream="orders", reconfiguration_id="r1", plan_hash="p1", holder="cli"
    )
    lock = AuditLedgerResource(home=str(home)).ledger().lock("orders")
    assert lock is not None and lock.reconfiguration_id == "r1"
    assert not (tmp_path / "elsewhere" / "ledger.db").exists()
    url = f"sqlite:///{tmp_path / 'explicit.db'}"
    AuditLedgerResource(url=url, home=str(home)).ledger().lock("orders")  # an explicit url wins
    assert (tmp_path / "explicit.db").exists()
