"""``reconf reconfigure plan`` and the errors of ``reconf reconfigure apply`` that need no running stream."""

import json

from dagster_reconf.cli import main
from dagster_reconf.core.reconfig import ExecutionPlan
from dagster_reconf.core.spec import StreamSpec
from dagster_reconf.core.store.paths import StreamPaths


def make_stream(home, name="orders") -> StreamSpec:
    spec = StreamSpec(name=name, entrypoint="my_pkg.streams:orders", state_partitions=6, source_partitions=3)
    paths = StreamPaths(home, name)
    paths.create()
    paths.spec.write_text(spec.model_dump_json())
    return spec


def test_plan_prints_the_plan_in_force_as_json(tmp_path, capsys):
    spec = make_stream(tmp_path)
    assert main(["--home", str(tmp_path), "reconfigure", "plan", "orders"]) == 0
    plan = ExecutionPlan.parse(capsys.readouterr().out)
    assert plan == ExecutionPlan.of(spec)
    assert plan.partitioning.state_partition_count == 6


def test_apply_names_a_missing_plan_file_and_how_to_write_one(tmp_path, capsys):
    make_stream(tmp_path)
    missing = tmp_path / "nope.json"
    assert main(["--home", str(tmp_path), "reconfigure", "apply", "orders", "--plan", str(missing)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert f"plan file {missing} not found" in out and "reconf reconfigure plan orders > plan.json" in out


def test_unknown_stream_names_the_known_ones(tmp_path, capsys):
    make_stream(tmp_path)
    assert main(["--home", str(tmp_path), "reconfigure", "plan", "ghost"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "no stream named 'ghost'" in out and "known streams: orders" in out


def test_apply_without_a_change_says_what_to_give(tmp_path, capsys):
    make_stream(tmp_path)
    assert (
        main(["--home", str(tmp_path), "--ledger", f"sqlite:///{tmp_path / 'l.db'}", "reconfigure", "apply", "orders"])
        == 2
    )
    assert "needs --plan FILE or at least one --set key=value" in capsys.readouterr().out
    assert json.loads(StreamPaths(tmp_path, "orders").spec.read_text())["state_partitions"] == 6


def test_apply_refuses_settings_a_plan_cannot_carry(tmp_path, capsys):
    # options and spark_conf are not plan knobs: ExecutionPlan.of would drop them, and the run would change nothing
    make_stream(tmp_path)
    assert (
        main(
            [
                "--home",
                str(tmp_path),
                "--ledger",
                f"sqlite:///{tmp_path / 'l.db'}",
                "reconfigure",
                "apply",
                "orders",
                "--set",
                "options.rate=3000",
                "--set",
                "state_partitions=12",
            ]
        )
        == 2
    )
    out = " ".join(capsys.readouterr().out.split())
    assert "['options.rate'] are not among them" in out and "reconf stream restart orders --set KEY=VALUE" in out
    assert "state_partitions" in out.split("are not among")[0]  # the knobs it does take are named
    assert json.loads(StreamPaths(tmp_path, "orders").spec.read_text())["state_partitions"] == 6


def test_reconf_plan_on_a_stream_with_no_batches_yet_says_so_and_applies_nothing(tmp_path, capsys):
    make_stream(tmp_path)
    home = ["--home", str(tmp_path), "--ledger", f"sqlite:///{tmp_path / 'l.db'}"]
    assert main([*home, "plan", "orders"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "orders: hold" in out and "evidence: configuration before-recent-metrics, no settled batches yet" in out
    assert "state_partitions │ 6 │ same" in out and "reason: metric window not full: 0 of 6 batches" in out
    assert main([*home, "plan", "orders", "--apply"]) == 0
    assert "nothing to apply: metric window not full" in capsys.readouterr().out
    assert main([*home, "plan", "orders", "--json", "--set", "window_batches=2"]) == 0
    decided = json.loads(capsys.readouterr().out)
    assert decided["action"] == "hold" and decided["reason"] == "metric window not full: 0 of 2 batches"
    assert decided["current"]["state_partitions"] == 6 and decided["plan"] is None and not decided["for_next_run"]
    assert main([*home, "plan", "orders", "--set", "bogus=1"]) == 2
    assert "bogus" in capsys.readouterr().out
