"""The CLI on bad input: one clear line and exit 2, never a traceback, never a user's value read as markup."""

import pytest
import sqlalchemy as sa

from dagster_reconf.cli import main
from dagster_reconf.core.ledger import AuditLedger, default_ledger_url


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, " ".join((captured.out + captured.err).split())


@pytest.mark.parametrize("action", ["status", "stop", "watch"])
@pytest.mark.parametrize("name", ["../x", "a/b", ".."])
def test_a_stream_name_that_is_no_folder_is_one_line(tmp_path, capsys, action, name):
    code, out = _run(capsys, "--home", str(tmp_path), "stream", action, name)
    assert code == 2 and f"stream name '{name}' cannot name a folder" in out and "Traceback" not in out


@pytest.mark.parametrize("action", [["reconfigure", "plan"], ["reconfigure", "abort"]])
def test_reconfigure_with_a_bad_name_is_one_line(tmp_path, capsys, action):
    code, out = _run(capsys, "--home", str(tmp_path), *action, "../x")
    assert code == 2 and "cannot name a folder" in out and "Traceback" not in out


@pytest.mark.parametrize(
    "storage,stream,match",
    [
        ("bucket/reconf", "orders", "storage 'bucket/reconf' is not a URL; use file:///abs/path"),
        ("nosuchfs://bucket", "orders", "scheme 'nosuchfs' is not a filesystem fsspec knows"),
        ("file:///tmp/reconf", "../x", "stream name '../x' cannot name a folder"),
    ],
)
def test_an_agent_with_bad_arguments_is_one_line_before_it_serves(tmp_path, capsys, storage, stream, match):
    code, out = _run(capsys, "--home", str(tmp_path), "agent", "--storage", storage, "--stream", stream)
    assert code == 2 and match in out and "Traceback" not in out


@pytest.mark.parametrize(
    "content,match",
    [
        ("{not json", "is not JSON: Expecting property name"),
        ("[1, 2]", "must hold a JSON object of spec fields, not a list"),
    ],
)
def test_a_bad_spec_file_is_named(tmp_path, capsys, content, match):
    spec = tmp_path / "spec.json"
    spec.write_text(content)
    code, out = _run(capsys, "--home", str(tmp_path), "stream", "start", "s", "--spec-file", str(spec))
    assert code == 2 and match in out and "Traceback" not in out


def test_values_with_brackets_are_printed_not_interpreted(tmp_path, capsys):
    code, out = _run(
        capsys, "--home", str(tmp_path), "stream", "start", "s", "--entrypoint", "m:f", "--set", "master=[/bold]"
    )
    assert code == 2 and "master '[/bold]' is not a Spark master URL" in out


def test_audit_show_warns_on_a_forged_record(tmp_path, capsys):
    ledger = AuditLedger(default_ledger_url(tmp_path))
    ledger.append(stream="s", kind="reconfiguration.started", reconfiguration_id="r1", payload={"strategy": "native"})
    with ledger.engine.begin() as connection:
        connection.execute(sa.text("DROP TRIGGER reconf_audit_records_no_update"))
        connection.execute(sa.text("UPDATE reconf_audit_records SET payload = :p"), {"p": '{"strategy":"forged"}'})
    code, out = _run(capsys, "--home", str(tmp_path), "audit", "show", "r1")
    assert code == 1 and "damaged record, do not trust it: edited" in out and "run `reconf audit verify`" in out
    code, out = _run(capsys, "--home", str(tmp_path), "audit", "list")
    assert code == 0 and "DAMAGED" in out


def test_audit_show_takes_a_prefix_of_one_id_and_refuses_one_of_several(tmp_path, capsys):
    ledger = AuditLedger(default_ledger_url(tmp_path))
    for rid in ("051608b151c242aa", "0516ffff00000000", "9e0c"):
        ledger.append(stream="s", kind="reconfiguration.started", reconfiguration_id=rid, payload={"n": 1})
    code, out = _run(capsys, "--home", str(tmp_path), "audit", "show", "051608")  # as the list cuts it
    assert code == 0 and "reconfiguration.started" in out
    code, out = _run(capsys, "--home", str(tmp_path), "audit", "show", "0516")
    assert code == 2 and "'0516' begins 2 reconfiguration ids" in out and "give more of it" in out
    code, out = _run(capsys, "--home", str(tmp_path), "audit", "show", "77")
    assert code == 2 and "no reconfiguration '77'" in out


def test_status_puts_a_dead_driver_on_the_record_once_and_answers_without_a_ledger(tmp_path, capsys):
    import json
    import socket

    from dagster_reconf.core.spec import StreamSpec
    from dagster_reconf.core.store.paths import StreamPaths

    spec = StreamSpec(name="s", entrypoint="tests.user_streams.bad_deploy:values", options={"output_dir": "o"})
    paths = StreamPaths(tmp_path, "s")
    paths.create()
    paths.write_spec(spec.model_dump_json())
    # what a SIGKILLed driver leaves: a record that says it runs, and no such process
    paths.driver.write_text(json.dumps({"status": "running", "pid": 2**22 + 17, "host": socket.gethostname()}))
    home = ["--home", str(tmp_path)]
    unreachable = ["--ledger", "postgresql://nobody:x@127.0.0.1:1/none"]
    code, out = _run(capsys, *home, *unreachable, "stream", "status", "s")
    assert code == 0 and "died without stopping" in out and "1 incident(s) not recorded in the audit ledger" in out
    code, out = _run(capsys, *home, "stream", "status", "s")
    assert code == 0 and "driver_died driver process 4194321 is gone" in out and "audit record as #1" in out
    code, out = _run(capsys, *home, "stream", "status", "s")
    assert code == 0 and "audit record" not in out, "recorded once"
