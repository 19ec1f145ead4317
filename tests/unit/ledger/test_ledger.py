import threading

import pytest
import sqlalchemy as sa

from dagster_reconf.core.ledger import AuditLedger, LedgerError, default_ledger_url
from dagster_reconf.core.ledger.ledger import GENESIS_HASH


@pytest.fixture(name="ledger", params=["sqlite", "postgresql"])
def ledger_fixture(request, tmp_path):
    if request.param == "sqlite":
        ledger = AuditLedger(default_ledger_url(tmp_path))
    else:
        url = request.getfixturevalue("postgres_url")
        ledger = AuditLedger(url)
        with ledger.engine.begin() as connection:  # one database for the session: start each test empty
            connection.execute(
                sa.text("ALTER TABLE reconf_audit_records DISABLE TRIGGER reconf_audit_records_append_only")
            )
            connection.execute(sa.text("DELETE FROM reconf_audit_records"))
            connection.execute(sa.text("DELETE FROM reconf_stream_locks"))
            connection.execute(
                sa.text("ALTER TABLE reconf_audit_records ENABLE TRIGGER reconf_audit_records_append_only")
            )
    yield ledger
    ledger.dispose()


def test_records_chain_and_verify(ledger):
    first = ledger.append(
        stream="orders",
        kind="reconfiguration.started",
        payload={"plan": {"state_partitions": 8}},
        reconfiguration_id="r1",
    )
    second = ledger.append(
        stream="orders", kind="step.end", step="pause", payload={"seconds": 1.5}, reconfiguration_id="r1"
    )
    assert (first.seq, second.seq) == (1, 2)
    assert first.prev_hash == GENESIS_HASH and second.prev_hash == first.hash
    assert ledger.head() == second.hash
    report = ledger.verify()
    assert report.ok and report.records == 2 and report.head == second.hash
    assert [r.step for r in ledger.records(reconfiguration_id="r1")] == [None, "pause"]
    assert ledger.records(stream="orders", kinds=["step.end"])[0].payload == {"seconds": 1.5}


def test_records_are_append_only_in_the_database(ledger):
    ledger.append(stream="orders", kind="note", payload={"a": 1})
    with pytest.raises(sa.exc.DBAPIError, match="append-only"):
        with ledger.engine.begin() as connection:
            connection.execute(sa.text("UPDATE reconf_audit_records SET payload = '{}'"))
    with pytest.raises(sa.exc.DBAPIError, match="append-only"):
        with ledger.engine.begin() as connection:
            connection.execute(sa.text("DELETE FROM reconf_audit_records"))


def _drop_append_only_triggers(ledger: AuditLedger) -> None:
    """What someone with the rights to do it would do before tampering."""
    with ledger.engine.begin() as connection:
        if ledger.engine.dialect.name == "sqlite":
            connection.execute(sa.text("DROP TRIGGER reconf_audit_records_no_update"))
            connection.execute(sa.text("DROP TRIGGER reconf_audit_records_no_delete"))
        else:
            connection.execute(
                sa.text("ALTER TABLE reconf_audit_records DISABLE TRIGGER reconf_audit_records_append_only")
            )


def test_verify_detects_an_edited_record(ledger):
    for k in range(5):
        ledger.append(stream="orders", kind="step.end", step=f"s{k}", payload={"k": k})
    _drop_append_only_triggers(ledger)
    with ledger.engine.begin() as connection:
        connection.execute(sa.text("UPDATE reconf_audit_records SET payload = :p WHERE seq = 3"), {"p": '{"k":99}'})
    report = ledger.verify()
    assert not report.ok and report.first_bad_seq == 3
    assert "record 3 (step.end, stream 'orders') was edited" in report.problem


def test_verify_detects_a_deleted_record_and_a_truncated_tail(ledger):
    records = [ledger.append(stream="orders", kind="note", payload={"k": k}) for k in range(4)]
    _drop_append_only_triggers(ledger)
    with ledger.engine.begin() as connection:
        connection.execute(sa.text("DELETE FROM reconf_audit_records WHERE seq = 4"))
    assert ledger.verify().ok, "a truncated tail alone leaves a valid chain"
    report = ledger.verify(expect_head=records[-1].hash)
    assert not report.ok and "expected head" in report.problem
    with ledger.engine.begin() as connection:
        connection.execute(sa.text("DELETE FROM reconf_audit_records WHERE seq = 2"))
    report = ledger.verify()
    assert not report.ok and "record 2 is missing" in report.problem


def test_verify_detects_a_rewritten_chain(ledger):
    for k in range(3):
        ledger.append(stream="orders", kind="note", payload={"k": k})
    _drop_append_only_triggers(ledger)
    with ledger.engine.begin() as connection:  # a consistent-looking record whose predecessor link is forged
        connection.execute(sa.text("UPDATE reconf_audit_records SET prev_hash = :h WHERE seq = 2"), {"h": "f" * 64})
    report = ledger.verify()
    assert not report.ok and report.first_bad_seq == 2 and "rewritten" in report.problem


def test_concurrent_appends_keep_one_chain(ledger):
    def writer(k: int) -> None:
        for i in range(10):
            ledger.append(stream=f"s{k}", kind="note", payload={"i": i})

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = ledger.verify()
    assert report.ok and report.records == 40


def test_lock_admits_one_reconfiguration_per_stream(ledger):
    mine = ledger.acquire_lock(stream="orders", reconfiguration_id="r1", plan_hash="p1", holder="run-1")
    assert mine.reconfiguration_id == "r1"
    again = ledger.acquire_lock(stream="orders", reconfiguration_id="r1", plan_hash="p1", holder="run-2")
    assert again.reconfiguration_id == "r1" and again.holder == "run-1", "re-entrant: the first holder is kept"
    other = ledger.acquire_lock(stream="orders", reconfiguration_id="r2", plan_hash="p2", holder="run-3")
    assert other.reconfiguration_id == "r1", "another reconfiguration must not take a held stream"
    assert (
        ledger.acquire_lock(
            stream="payments", reconfiguration_id="r2", plan_hash="p2", holder="run-3"
        ).reconfiguration_id
        == "r2"
    )
    assert not ledger.release_lock("orders", "r2")
    assert ledger.release_lock("orders", "r1")
    assert ledger.lock("orders") is None


def test_reopening_keeps_records_and_schema(tmp_path):
    url = default_ledger_url(tmp_path)
    AuditLedger(url).append(stream="orders", kind="note")
    reopened = AuditLedger(url)
    assert reopened.verify().records == 1


@pytest.mark.parametrize("url", ["ledger.db", "", "mysql://nobody@127.0.0.1/x"])
def test_bad_urls_are_refused_with_the_fix(url):
    with pytest.raises(LedgerError, match="ledger url|cannot open ledger url"):
        AuditLedger(url)


def test_records_read_back_name_their_damage_and_append_refuses_a_broken_chain(ledger):
    for k in range(4):
        ledger.append(stream="orders", kind="note", reconfiguration_id="r1", payload={"k": k})
    assert all(r.damage is None for r in ledger.records())
    _drop_append_only_triggers(ledger)
    with ledger.engine.begin() as connection:
        connection.execute(sa.text("UPDATE reconf_audit_records SET payload = :p WHERE seq = 2"), {"p": '{"k":99}'})
        connection.execute(sa.text("UPDATE reconf_audit_records SET payload = :p WHERE seq = 3"), {"p": "not json"})
    damaged = {r.seq: r.damage for r in ledger.records(reconfiguration_id="r1")}
    assert damaged[1] is None and damaged[4] is None
    assert damaged[2] == "edited: its contents do not match its hash"
    assert damaged[3] == "edited: its contents do not match its hash"  # unreadable, and edited too
    assert ledger.records(reconfiguration_id="r1")[2].payload == {"unreadable": "not json"}, "shown, not crashed on"
    with pytest.raises(LedgerError, match=r"broken chain \(record 2 .* was edited.*reconf audit verify"):
        AuditLedger(ledger.url).append(stream="orders", kind="note")  # a fresh process walks the whole chain
    with ledger.engine.begin() as connection:
        connection.execute(sa.text("DELETE FROM reconf_audit_records WHERE seq IN (2, 3)"))
    (last,) = ledger.records(after_seq=3)
    assert last.damage == "record 3 before it is missing: records were deleted"


def test_the_sqlite_ledger_is_readable_by_its_owner_only(tmp_path):
    import stat

    AuditLedger(default_ledger_url(tmp_path)).append(stream="orders", kind="note")
    assert stat.S_IMODE((tmp_path / "ledger.db").stat().st_mode) == 0o600
    (tmp_path / "ledger.db").chmod(0o644)
    AuditLedger(default_ledger_url(tmp_path))
    assert stat.S_IMODE((tmp_path / "ledger.db").stat().st_mode) == 0o600, "an existing one is tightened"


def test_a_lease_admits_one_process_and_is_taken_over_once_its_owner_is_gone(ledger, monkeypatch):
    from dagster_reconf.core.errors import ReconfigurationRefused
    from dagster_reconf.core.ledger import locks

    ledger.acquire_lock(stream="orders", reconfiguration_id="r1", plan_hash="p", holder="run a")
    me = locks.this_process()
    alive_elsewhere = "otherhost:1:1.0/7"  # another host: only its heartbeat tells
    assert ledger.locks.claim_lease("orders", "r1", me) is None, "the acquirer holds it"
    with ledger.locks.leased("orders", "r1", me):
        held = ledger.locks.claim_lease("orders", "r1", alive_elsewhere)
        assert held is not None and "whose last heartbeat was 0 s ago" in held
        with pytest.raises(ReconfigurationRefused, match="is running its steps in process"):
            with ledger.locks.leased("orders", "r1", alive_elsewhere):
                pass
    assert ledger.lock("orders").owner is None, "given back after the block"
    assert ledger.locks.claim_lease("orders", "r1", alive_elsewhere) is None
    assert ledger.locks.claim_lease("orders", "r1", me) is not None, "now the other one holds it"
    monkeypatch.setattr(locks, "LEASE_S", -1.0)  # its heartbeat is stale: taken over
    assert ledger.locks.claim_lease("orders", "r1", me) is None and ledger.lock("orders").owner == me


def test_a_named_owner_keeps_its_lease_between_steps_run_by_different_processes(ledger, monkeypatch):
    """A Dagster run's ops are separate processes: the run's name owns the lease, kept from one op to the next."""
    from dagster_reconf.core.errors import ReconfigurationRefused
    from dagster_reconf.core.ledger import locks

    run = "dagster run 1234"
    ledger.acquire_lock(stream="orders", reconfiguration_id="r1", plan_hash="p", holder=run, owner=run)
    with ledger.locks.leased("orders", "r1", run, keep=True):  # the first op
        pass
    assert ledger.lock("orders").owner == run, "kept after the op"
    with pytest.raises(ReconfigurationRefused, match="dagster run 1234"):  # a second run, between the ops
        with ledger.locks.leased("orders", "r1", locks.this_process()):
            pass
    with ledger.locks.leased("orders", "r1", run, keep=True):  # the next op of the same run
        pass
    monkeypatch.setattr(locks, "LEASE_S", -1.0)  # the run died between ops: its lease runs out
    assert ledger.locks.claim_lease("orders", "r1", locks.this_process()) is None


def test_a_dead_local_owner_is_provably_gone():
    import socket

    from dagster_reconf.core.ledger.locks import owner_gone, this_process

    assert not owner_gone(this_process())
    assert owner_gone(f"{socket.gethostname()}:999999999:1.0/1")
    assert not owner_gone("elsewhere:1:1.0/1")
